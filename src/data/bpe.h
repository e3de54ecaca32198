/* Internal layout of oj_tokenizer, shared by the files of src/data that load,
 * save, train and run it. */
#ifndef OJAS_DATA_BPE_H
#define OJAS_DATA_BPE_H

#include <pthread.h>
#include <stdbool.h>

#include "data/hashmap.h"
#include "ojas/data.h"

struct oj_pretok_re;

typedef struct oj_special {
    char *text;
    size_t len;
    int32_t id;
    bool always;          /* a tokenizer.json added token that is not special:
                             split out of the text in every encode mode */
} oj_special;

/* Per-thread encode scratch; a tokenizer keeps a free list of them. */
typedef struct oj_tok_session {
    struct oj_tok_session *next;
    oj_strmap cache;      /* piece bytes -> (offset << 8 | count) into cache_ids */
    int32_t *cache_ids;
    size_t cache_len, cache_cap;
    size_t *ends;         /* piece ends from the pre-tokeniser */
    int32_t *part_id;     /* merge scratch, one per byte of the piece */
    int32_t *part_rank;
    int32_t *part_next, *part_prev;
    uint64_t *heap;
    size_t scratch_cap;
    void *md;             /* PCRE2 match data (PCRE2 mode) */
} oj_tok_session;

typedef struct oj_tok_pool {
    pthread_mutex_t mu;
    oj_tok_session *free;
} oj_tok_pool;

struct oj_tokenizer {
    int32_t n_ids;        /* max id + 1 */
    uint32_t *tok_off;    /* [n_ids] offset into bytes */
    uint32_t *tok_len;    /* [n_ids] 0 = no such id */
    uint8_t *is_special;  /* [n_ids] */
    uint8_t *bytes;
    size_t bytes_len, bytes_cap;
    size_t ids_cap;
    oj_strmap ranks;      /* mergeable token bytes -> id */
    oj_pairmap pairs;     /* (left id, right id) -> id of their concatenation */
    int32_t byte_id[256];
    oj_special *specials;
    int n_specials;
    int32_t eot;
    int32_t (*merges)[2]; /* optional, in priority order (vocab.bpe) */
    int64_t n_merges;
    oj_pretokenizer pretok;
    struct oj_pretok_re *re;
    const char *encoding;   /* tiktoken encoding whose own pattern tok->re is
                               ("cl100k_base", "o200k_base"; static), or NULL */
    oj_tok_pool *pool;
    /* Loaded from tokenizer.json (src/data/tokenizer_json.c); all zero for
     * the other formats. */
    uint8_t hf;             /* encode_ordinary goes through oj_hf_encode_ordinary */
    uint8_t hf_split;       /* oj_hf_split */
    uint8_t strip_space;    /* decode drops one leading space (a Strip decoder) */
    struct oj_hf *hfx;      /* normalizer and SentencePiece-style state */
    uint8_t merges_only;    /* ignore_merges false: a piece is merged even when
                               the vocabulary holds it whole */
    int32_t *merge_id;      /* [n_merges] merge rank -> id of the merged token;
                               NULL: the pair table's value is that id */
    int32_t *tmpl_ids;      /* the post-processor's single-sequence template: */
    int n_prefix, n_suffix; /* n_prefix ids before the text, n_suffix after */
    char *eos_note;         /* eot < 0 after oj__tokenizer_find_eos: the files
                               it looked at and why each named no EOS, or NULL */
};

/* How a tokenizer.json tokenizer splits text into pieces. */
typedef enum oj_hf_split {
    OJ_SPLIT_GPT2 = 0,  /* ByteLevel use_regex: the GPT-2 pattern (tok->pretok) */
    OJ_SPLIT_REGEX = 1, /* Split with the file's regex (tok->re), Isolated */
    OJ_SPLIT_NONE = 2,  /* no pre-tokenizer: each text section is one piece */
} oj_hf_split;

/* Encode one piece: a whole-piece lookup (unless merges_only), the session's
 * cache, or oj_bpe_merge. Appends to out; OJ_ERR_CAPACITY out of memory. */
oj_status oj_bpe_encode_piece(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                              size_t len, oj_tokens *out);
/* Ordinary text (no added tokens) through a tokenizer.json pipeline; first:
 * the section starts the text (no added token before it). */
oj_status oj_hf_encode_ordinary(const oj_tokenizer *tok, oj_tok_session *s, const uint8_t *b,
                                size_t n, bool first, oj_tokens *out, oj_error *err);

/* Builder: new empty tokenizer; add mergeable tokens and specials; finish
 * (checks every byte has a token and builds the pair table). */
oj_tokenizer *oj_bpe_new(void);
oj_status oj_bpe_add_token(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id,
                           oj_error *err);
oj_status oj_bpe_add_special(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id,
                             oj_error *err);
oj_status oj_bpe_finish(oj_tokenizer *tok, oj_error *err);
/* Store the bytes of id (no merge table entry): len > 0, id unused. */
oj_status oj_bpe_put_id(oj_tokenizer *tok, const uint8_t *b, size_t len, int32_t id, bool special,
                        oj_error *err);
/* Does decode(encode(text)) give valid UTF-8 text back byte for byte? True
 * for the GPT-2 and tiktoken formats and for tokenizer.json byte-level BPE
 * without a normalizer. */
bool oj_hf_text_round_trips(const oj_tokenizer *tok);
/* When tok has no eot (no "<|endoftext|>"), take the first special token
 * that dir names as EOS: tokenizer_config.json "eos_token" (a string or
 * {"content"}), else generation_config.json, else config.json
 * "eos_token_id" (an id or a list: the first). If none does, tok->eos_note
 * lists each file and why (absent, no key, not a special token). Never
 * fails (out of memory leaves eot -1 and the note shorter). */
void oj__tokenizer_find_eos(oj_tokenizer *tok, const char *dir);
/* Free the tokenizer.json extras (NULL is a no-op). */
void oj_hf_free(struct oj_hf *x);
/* Min-heap of uint64 (merge.c); the caller sizes h. */
void oj_heap_push(uint64_t *h, size_t *n, uint64_t v);
uint64_t oj_heap_pop(uint64_t *h, size_t *n);

/* Id of mergeable token b[0..len), or -1. */
static inline int32_t oj_bpe_rank(const oj_tokenizer *tok, const uint8_t *b, size_t len) {
    int64_t e = oj_strmap_find(&tok->ranks, b, len, oj_strmap_hash(b, len));
    return e < 0 ? -1 : (int32_t)tok->ranks.ents[e].value;
}

/* Merge the bytes of one piece into ids (tiktoken's byte_pair_merge, with
 * ranks restricted to < max_rank), appending to out. Uses sess scratch. */
oj_status oj_bpe_merge(const oj_tokenizer *tok, oj_tok_session *sess, const uint8_t *b,
                       size_t len, int32_t max_rank, oj_tokens *out);

oj_tok_session *oj_tok_session_get(const oj_tokenizer *tok);
void oj_tok_session_put(const oj_tokenizer *tok, oj_tok_session *s);
/* Make sure sess can merge a piece of n bytes. 0 ok, -1 out of memory. */
int oj_tok_session_reserve(oj_tok_session *s, size_t n);

/* GPT-2's byte <-> printable-unicode mapping (bytes_to_unicode). */
uint32_t oj_gpt2_byte_to_cp(uint8_t b);
/* -1 if cp is not the image of a byte. */
int oj_gpt2_cp_to_byte(uint32_t cp);
/* Position of byte b in GPT-2's byte order (the id GPT-2 gives it). */
int oj_gpt2_byte_rank(uint8_t b);

/* Number of usable CPUs (sched affinity), >= 1. */
int oj_data_cpu_count(void);

/* XXH3-64 of ids 0..n-1 of tok in id order, each as its byte length
 * (uint32, little-endian) then its bytes: how a tiktoken rank file is
 * identified as GPT-2's (load.c). */
uint64_t oj__tokenizer_ranks_hash(const oj_tokenizer *tok, int32_t n);

#endif
