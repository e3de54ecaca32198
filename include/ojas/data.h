/* ojas data: the GPT-2 byte-level BPE tokenizer, BPE training, token shards
 * (llm.c .bin layout), corpus preparation and the resumable batch loader.
 *
 * Functions without an engine report failures through an oj_error (may be
 * NULL) and return the status; the batch loader records on the engine.
 * Token ids are int32_t; a tokenizer has at most 2^31 - 1 ids. */
#ifndef OJAS_DATA_H
#define OJAS_DATA_H

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tokens */

/* A growable array of token ids. Zero-initialise ({0}) before first use;
 * functions that produce tokens append to it. Free with oj_tokens_free. */
typedef struct oj_tokens {
    int32_t *ids;
    size_t len, cap;
} oj_tokens;

/* Append one id; OJ_ERR_CAPACITY when out of memory. */
oj_status oj_tokens_push(oj_tokens *t, int32_t id);
/* Release the array and zero the struct. NULL is a no-op. */
void oj_tokens_free(oj_tokens *t);

/* ---------------------------------------------------------------- tokenizer
 * Byte-level BPE as in GPT-2 / tiktoken (Radford et al., "Language Models
 * are Unsupervised Multitask Learners", 2019; Sennrich et al., "Neural
 * Machine Translation of Rare Words with Subword Units", 2016): text is
 * split by the GPT-2 pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (ECMAScript meaning of \s and Unicode 17 classes, the same as js-tiktoken
 * under node), then each piece's UTF-8 bytes are merged greedily: the
 * adjacent pair whose concatenation has the lowest rank (= id) merges first,
 * leftmost on ties. Bytes that are not valid UTF-8 split as "other"
 * characters and encode as their byte tokens, so decode(encode(b)) == b for
 * every byte string b. A loaded tokenizer is immutable and may be used by
 * many threads at once (encode keeps per-thread caches internally). */
typedef struct oj_tokenizer oj_tokenizer;

/* Load from a directory holding `encoder.json` + `vocab.bpe` (GPT-2 / HF
 * format), else the same files named `vocab.json` + `merges.txt` (as a
 * transformers GPT-2 directory has them) when there is no `tokenizer.json`,
 * else `tokenizer.json` (oj_tokenizer_load_hf), else exactly one
 * `*.tiktoken` rank file (as oj_tokenizer_load_tiktoken: the ranks of
 * tiktoken's gpt2, cl100k_base or o200k_base). OJ_ERR_IO when the
 * files are missing or unreadable, OJ_ERR_CORRUPT when malformed (bad JSON,
 * bad base64, duplicate tokens or ids, a missing byte token, merges that
 * reference unknown tokens, an encoder.json entry that no merge produces
 * although the pre-tokenizer would keep it whole: a truncated vocab.bpe),
 * OJ_ERR_UNSUPPORTED when vocab.bpe's merge order disagrees with
 * encoder.json's ids or a rank file is not GPT-2's, OJ_ERR_CAPACITY out of
 * memory. Without "<|endoftext|>", eot is the EOS the directory names (see
 * oj_tokenizer_eot).
 * On success *out owns a new tokenizer (free with oj_tokenizer_free). */
oj_status oj_tokenizer_load(const char *dir, oj_tokenizer **out, oj_error *err);
/* GPT-2 files: encoder.json maps byte-to-unicode strings to ids; vocab.bpe
 * lists merges in priority order. Entries of encoder.json that are neither
 * single bytes nor the result of a merge (GPT-2: "<|endoftext|>") become
 * special tokens, but only when the pre-tokenizer splits them (a special
 * is never met whole in text); one it keeps whole is a merge missing from
 * vocab.bpe, OJ_ERR_CORRUPT naming the entry and vocab.bpe's last line. */
oj_status oj_tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe,
                                 oj_tokenizer **out, oj_error *err);
/* The same from lists in memory (how GGUF's tokenizer.ggml.tokens and
 * .merges carry them): tokens[id] the byte-level string of id (NULL: no
 * token has that id), n_tokens < 2^31; merges[i] "A B", priority order.
 * `what` names the source in messages (may be NULL). Errors as
 * oj_tokenizer_load_gpt2's (a repeated token, a merge of unknown parts,
 * ids out of merge order, ...), OJ_ERR_INVALID_ARGUMENT for bad
 * arguments. *out owns the new tokenizer. */
oj_status oj_tokenizer_from_gpt2_lists(int64_t n_tokens, const char *const *tokens,
                                       int64_t n_merges, const char *const *merges,
                                       const char *what, oj_tokenizer **out, oj_error *err);
/* A tiktoken rank file: lines "<base64 bytes> <rank>". Rank = id. The
 * file does not say which pre-tokenisation pattern and special tokens its
 * ranks belong to, so the ranks are identified (their XXH3-64 hash) as one
 * of tiktoken's encodings that ojas knows, and encode as js-tiktoken does:
 * - gpt2 / r50k_base (ranks 0..50255): GPT-2's pattern (the hand-written
 *   scanner), "<|endoftext|>" = 50256;
 * - cl100k_base (0..100255) and o200k_base (0..199997): their own patterns
 *   through PCRE2 (JIT), with node's Unicode 17 classes spelled out as
 *   code point ranges (generated: scripts/gen_tiktoken_patterns.mjs), and
 *   their special tokens (cl100k: <|endoftext|> 100257, <|fim_prefix|>
 *   100258, <|fim_middle|> 100259, <|fim_suffix|> 100260, <|endofprompt|>
 *   100276; o200k: <|endoftext|> 199999, <|endofprompt|> 200018). Such a
 *   tokenizer keeps its pattern (oj_tokenizer_set_pretokenizer refuses
 *   OJ_PRETOK_FAST) and cannot be saved as GPT-2 files (oj_tokenizer_save
 *   refuses).
 * Any other set of ranks is OJ_ERR_UNSUPPORTED, naming cl100k_base or
 * o200k_base when it has their size but not their ranks, and p50k_base by
 * its size. */
oj_status oj_tokenizer_load_tiktoken(const char *path, oj_tokenizer **out, oj_error *err);
/* The same without the identification: the caller vouches that the ranks
 * were made with GPT-2's pattern (e.g. ranks.tiktoken written by
 * oj_tokenizer_save for a tokenizer trained with oj_bpe_train). */
oj_status oj_tokenizer_load_tiktoken_as_gpt2(const char *path, oj_tokenizer **out, oj_error *err);
/* A Hugging Face tokenizer.json whose model.type is "BPE", encoded to the ids
 * of npm @huggingface/tokenizers (tokenizers.js):
 * - byte-level (GPT-2, Llama 3, Qwen2/3 files): a ByteLevel pre-tokenizer,
 *   alone (its GPT-2 regex) or after a Split whose regex (Oniguruma syntax)
 *   is translated to PCRE2 with tokenizers.js's meaning (\s = Unicode
 *   White_Space, (?i:) folds ASCII only); model.ignore_merges (a piece the
 *   vocabulary holds whole is one token);
 * - SentencePiece-style (Llama 2 files): model.byte_fallback, merges over
 *   characters, a character outside the vocabulary as its <0xXX> tokens, no
 *   pre-tokenizer or Metaspace (split false), the Replace/ByteFallback/Fuse/
 *   Strip decoder.
 * Merges are "A B" strings or ["A", "B"] pairs, applied by their index
 * (lowest first, leftmost on ties). Normalizers: NFC (ICU; builds without
 * ICU refuse it), Prepend, Replace of a string, Sequence. added_tokens split
 * the text before anything else: special ones obey the encode flags like
 * "<|endoftext|>", the others are split out in every mode. A
 * TemplateProcessing post-processor, alone or in a Sequence after ByteLevel,
 * gives oj_tokenizer_template. Encoding needs valid UTF-8
 * (OJ_ERR_INVALID_ARGUMENT). eot is "<|endoftext|>" if the file has it, else
 * the EOS that the files beside it name (see oj_tokenizer_eot). Whatever
 * else the file asks for (another model, normalizer, pre-tokenizer, decoder,
 * post-processor, dropout, truncation, padding, lstrip/rstrip/single_word
 * tokens, a regex construct outside the translated subset, ...) is
 * OJ_ERR_UNSUPPORTED naming the file and field; bad JSON or a bad field is
 * OJ_ERR_CORRUPT naming the file and field (JSON errors: line and column);
 * OJ_ERR_IO when unreadable. The tokenizer cannot be saved
 * (oj_tokenizer_save refuses) and keeps its pre-tokenizer
 * (oj_tokenizer_set_pretokenizer refuses a change, except for files that use
 * the GPT-2 pattern). On success *out owns a new tokenizer. */
oj_status oj_tokenizer_load_hf(const char *tokenizer_json, oj_tokenizer **out, oj_error *err);
/* The ids that tokenizer.json's post-processor places around one encoded
 * text (TemplateProcessing "single": e.g. Llama's BOS before it): *prefix
 * [*n_prefix] and *suffix [*n_suffix], owned by tok; none (NULL, 0) for
 * other tokenizers. Encoding never adds them; callers do. Any pointer may
 * be NULL. */
void oj_tokenizer_template(const oj_tokenizer *tok, const int32_t **prefix, size_t *n_prefix,
                           const int32_t **suffix, size_t *n_suffix);
/* Replace tok's template (oj_tokenizer_template): prefix [n_prefix] ids
 * before an encoded text, suffix [n_suffix] after (copied; both empty:
 * none), e.g. a GGUF file's BOS under tokenizer.ggml.add_bos_token.
 * OJ_ERR_OUT_OF_RANGE naming an id outside [0, vocab size);
 * OJ_ERR_INVALID_ARGUMENT for NULL lists with a count, OJ_ERR_CAPACITY when
 * out of memory; tok is unchanged on error. */
oj_status oj_tokenizer_set_template(oj_tokenizer *tok, const int32_t *prefix, size_t n_prefix,
                                    const int32_t *suffix, size_t n_suffix, oj_error *err);
/* Write `encoder.json`, `vocab.bpe` and `ranks.tiktoken` into dir (created
 * if missing), each written to a temporary name and renamed. Merges are the
 * ones loaded or trained, or else recovered from the ranks (OJ_ERR_UNSUPPORTED
 * if a token has no two-part recovery). OJ_ERR_IO on write failure. */
oj_status oj_tokenizer_save(const oj_tokenizer *tok, const char *dir, oj_error *err);
/* NULL is a no-op. */
void oj_tokenizer_free(oj_tokenizer *tok);

/* Number of ids (max id + 1, specials included). */
int32_t oj_tokenizer_vocab_size(const oj_tokenizer *tok);
/* Id of "<|endoftext|>", else (a tokenizer loaded from a directory or a
 * tokenizer.json) of the first special token that the directory names as
 * EOS: tokenizer_config.json "eos_token" (a string or {"content"}), else
 * generation_config.json or config.json "eos_token_id" (an id or a list:
 * the first); -1 if none does. Llama 2: "</s>", Llama 3 base:
 * "<|end_of_text|>". */
int32_t oj_tokenizer_eot(const oj_tokenizer *tok);
/* Id of special token `text` (NUL-terminated), or -1. */
int32_t oj_tokenizer_special_id(const oj_tokenizer *tok, const char *text);
/* Bytes of token `id` (not NUL-terminated; specials give their text), or
 * NULL for an unknown id. *len receives the length. Owned by tok. */
const uint8_t *oj_tokenizer_token_bytes(const oj_tokenizer *tok, int32_t id, size_t *len);
/* Add a special token with an unused id (>= 0). Not thread-safe: call before
 * sharing the tokenizer. OJ_ERR_INVALID_ARGUMENT if text is empty or is
 * already a special, or the id is taken. */
oj_status oj_tokenizer_add_special(oj_tokenizer *tok, const char *text, int32_t id, oj_error *err);

/* Which pre-tokeniser encode uses. FAST (default) is the hand-written
 * scanner; PCRE2 runs the pattern through PCRE2 (JIT) as a reference. They
 * give the same pieces wherever PCRE2's Unicode tables (10.42: Unicode 14)
 * agree with Unicode 17; PCRE2 requires valid UTF-8 (encode returns
 * OJ_ERR_INVALID_ARGUMENT otherwise). Not thread-safe. */
typedef enum oj_pretokenizer { OJ_PRETOK_FAST = 0, OJ_PRETOK_PCRE2 = 1 } oj_pretokenizer;
oj_status oj_tokenizer_set_pretokenizer(oj_tokenizer *tok, oj_pretokenizer p, oj_error *err);

/* Encode flags: what to do with the text of a special token ("<|endoftext|>")
 * found in the input. Exactly one may be given; 0 means REFUSE. */
enum {
    OJ_ENCODE_REFUSE_SPECIAL = 0,  /* OJ_ERR_INVALID_ARGUMENT, naming it and its offset */
    OJ_ENCODE_ALLOW_SPECIAL = 1,   /* emit the special token's id */
    OJ_ENCODE_SPECIAL_AS_TEXT = 2, /* encode it as ordinary text */
};

/* Encode text[0..len) (any bytes) and append the ids to *out. Returns OJ_OK,
 * OJ_ERR_INVALID_ARGUMENT (NULL arguments, bad flags, a refused special),
 * OJ_ERR_CAPACITY (out of memory; *out keeps what was appended). */
oj_status oj_tokenizer_encode(const oj_tokenizer *tok, const char *text, size_t len,
                              unsigned flags, oj_tokens *out, oj_error *err);
/* Encode n texts on up to `threads` threads (0: the usable CPUs); text i
 * is appended to outs[i] (n zero-initialised or existing arrays). The
 * result is the same as n calls of oj_tokenizer_encode. */
oj_status oj_tokenizer_encode_batch(const oj_tokenizer *tok, size_t n, const char *const *texts,
                                    const size_t *lens, unsigned flags, int threads,
                                    oj_tokens *outs, oj_error *err);
/* Encode one long text on up to `threads` threads by cutting it after a
 * '\n' that is followed by a non-space ASCII character, where the pattern
 * always breaks; the ids equal oj_tokenizer_encode's. */
oj_status oj_tokenizer_encode_parallel(const oj_tokenizer *tok, const char *text, size_t len,
                                       unsigned flags, int threads, oj_tokens *out,
                                       oj_error *err);

/* Decode flags. */
enum {
    OJ_DECODE_LOSSY = 0,  /* invalid UTF-8 -> U+FFFD per maximal subpart (WHATWG) */
    OJ_DECODE_STRICT = 1, /* invalid UTF-8 -> OJ_ERR_CORRUPT naming the byte offset */
    OJ_DECODE_BYTES = 2,  /* the raw bytes, unchecked */
};

/* Decode ids[0..n) into a new NUL-terminated buffer *text (free() it) of
 * *len bytes (len may be NULL). OJ_ERR_OUT_OF_RANGE for an unknown id,
 * OJ_ERR_CORRUPT (strict only), OJ_ERR_CAPACITY. On error *text is NULL. */
oj_status oj_tokenizer_decode(const oj_tokenizer *tok, const int32_t *ids, size_t n,
                              unsigned flags, char **text, size_t *len, oj_error *err);

/* ---------------------------------------------------------------- training */

typedef struct oj_bpe_train_config {
    int32_t vocab_size;    /* total ids: 256 bytes + merges + specials; >= 256 + n_specials */
    int threads;           /* for pre-tokenisation and counting; 0: usable CPUs */
    const char *const *specials; /* NULL: {"<|endoftext|>"}; ids follow the merges */
    int n_specials;
    int64_t min_frequency; /* stop early when the best pair occurs fewer times (>= 1) */
} oj_bpe_train_config;

/* vocab_size 50257, one special "<|endoftext|>", min_frequency 2. */
oj_bpe_train_config oj_bpe_train_config_default(void);

/* Learn byte-level BPE merges from texts[0..n) (lens[i] bytes each; special
 * token strings inside a text are cut out and never merged across).
 * Deterministic: the pair with the highest count merges next, the smallest
 * (left id, right id) on ties, whatever the thread count. Byte ids follow
 * GPT-2's byte order, merge i gets id 256 + i. A pair whose bytes already
 * form a token is merged into that token without a new id. Stops early
 * (fewer ids) when no pair reaches min_frequency. On success *out owns the
 * new tokenizer. OJ_ERR_INVALID_ARGUMENT for a bad config. */
oj_status oj_bpe_train(const oj_bpe_train_config *cfg, size_t n, const char *const *texts,
                       const size_t *lens, oj_tokenizer **out, oj_error *err);

/* ---------------------------------------------------------------- shards
 * llm.c token shard layout: a header of 256 little-endian int32
 * (header[0] = 20240520 magic, header[1] = version: 1 = uint16 tokens,
 * 2 = uint32 tokens, header[2] = token count), then the tokens. */

#define OJ_SHARD_MAGIC 20240520
#define OJ_SHARD_HEADER_BYTES 1024

/* Write tokens[0..n) to path as version 1 or 2 (via a temporary file and a
 * rename). OJ_ERR_OUT_OF_RANGE when a token does not fit the version (or is
 * negative) or n > INT32_MAX, OJ_ERR_INVALID_ARGUMENT for a bad version,
 * OJ_ERR_IO on write failure. */
oj_status oj_shard_write(const char *path, const int32_t *tokens, int64_t n, int version,
                         oj_error *err);

/* A read-only memory-mapped shard. */
typedef struct oj_shard oj_shard;

/* Open and validate path's header. OJ_ERR_IO if it is not a regular file
 * or cannot be opened or mapped; OJ_ERR_CORRUPT for a short header, bad
 * magic, unknown version, negative count, a reserved header int (3..255)
 * that is not 0, or a size that is not header + count * token size
 * (truncated or trailing bytes). On success *out owns the mapping
 * (oj_shard_close). The tokens are checked by oj_shard_check_vocab. */
oj_status oj_shard_open(const char *path, oj_shard **out, oj_error *err);
/* Scan every token of s (near memory speed: a vectorised maximum per
 * block, the offender located only in a block that has one) and refuse the
 * first id >= vocab_size with OJ_ERR_CORRUPT naming the shard's path, the
 * token index, its byte offset in the file and the id. vocab_size >= 1
 * (OJ_ERR_INVALID_ARGUMENT otherwise); a shard whose version cannot hold
 * such an id is not read. */
oj_status oj_shard_check_vocab(const oj_shard *s, int64_t vocab_size, oj_error *err);
void oj_shard_close(oj_shard *s);
int64_t oj_shard_len(const oj_shard *s);
int oj_shard_version(const oj_shard *s);
/* Copy tokens [start, start + n) as int32 into dst; OJ_ERR_OUT_OF_RANGE
 * outside the shard; OJ_ERR_IO when the file was truncated since
 * oj_shard_open (the same inode, now shorter than its mapping). */
oj_status oj_shard_read(const oj_shard *s, int64_t start, int64_t n, int32_t *dst, oj_error *err);

/* Sorted paths of dir/<split>_*.bin (e.g. split "train"). *paths is a
 * malloc'd array of malloc'd strings (oj_paths_free). OJ_ERR_IO if dir
 * cannot be read or no shard matches. */
oj_status oj_shard_list(const char *dir, const char *split, char ***paths, int *n, oj_error *err);
void oj_paths_free(char **paths, int n);

/* ---------------------------------------------------------------- prepare */

typedef struct oj_prepare_config {
    const char *out_dir;  /* created if missing */
    double val_fraction;  /* [0, 1): the last fraction of the token stream is val */
    int64_t shard_tokens; /* tokens per shard (<= INT32_MAX); default 100000000 */
    int threads;          /* 0: usable CPUs */
    int version;          /* 0: 1 if the vocabulary fits uint16, else 2 */
} oj_prepare_config;

typedef struct oj_prepare_stats {
    int64_t bytes, documents, train_tokens, val_tokens;
    int train_shards, val_shards;
    int32_t separator; /* the id before every document: oj_tokenizer_eot */
} oj_prepare_stats;

oj_prepare_config oj_prepare_config_default(void);

/* Tokenise files[0..n) into out_dir/train_NNNNNN.bin and val_NNNNNN.bin.
 * The separator is oj_tokenizer_eot (<|endoftext|>, else the directory's
 * EOS token such as Llama 2's "</s>"). Each file is split into documents at
 * the text "<|endoftext|>" and at the separator's text; every non-empty
 * document is preceded by the separator id in the token stream (other
 * special texts are encoded as text). The shards do not record the
 * separator (llm.c's header has no field for it): stats->separator gives
 * it. A tokenizer without one is OJ_ERR_INVALID_ARGUMENT, naming the files
 * its directory was searched in. The whole stream is held in memory (4
 * bytes per token). stats may be NULL.
 * A set written whole or not at all, as train sees it: out_dir already
 * holding train_/val_ shards is OJ_ERR_INVALID_ARGUMENT naming one (a new
 * set would mix with them); the file OJ_PREPARE_INCOMPLETE is made in
 * out_dir before the first shard and removed after the last, and
 * oj_shard_list refuses a directory holding it (a prepare killed or failed
 * midway); a later prepare into that directory first removes the
 * unfinished set's shards. */
#define OJ_PREPARE_INCOMPLETE ".prepare-incomplete"
oj_status oj_data_prepare(const oj_tokenizer *tok, const oj_prepare_config *cfg, int n,
                          const char *const *files, oj_prepare_stats *stats, oj_error *err);

/* ---------------------------------------------------------------- loader
 * Batches of B windows of T + 1 consecutive tokens from a list of shards:
 * inputs [B, T] = window[0..T), targets [B, T] = window[1..T+1). Shard s of
 * n tokens holds (n - 1) / T windows (window k starts at token k*T); all
 * shards' windows form one index space of W windows. An epoch has
 * S = W / (B * world_size) steps (the remainder is skipped); at step t,
 * rank r takes the windows at epoch positions (t * world_size + r) * B + b,
 * b < B, so ranks never overlap and together cover S * B * world_size
 * windows per epoch. Sequential: position p is window p. Shuffled: window =
 * perm(seed, epoch)(p), a keyed Feistel bijection on [0, W) with
 * Philox4x32-10 rounds and cycle walking, so any batch is computed from
 * (seed, epoch, step) alone and the loader's whole state is oj_loader_state. */

typedef struct oj_loader_config {
    const char *const *paths; /* shard files, in order (copied) */
    int n_paths;
    int64_t B, T;             /* > 0 */
    int rank, world_size;     /* 0 <= rank < world_size */
    bool shuffle;
    uint64_t seed;
    oj_dtype dtype;           /* OJ_I64 (default) or OJ_I32 */
    bool prefetch;            /* build the next batch on a background thread */
    int64_t vocab_size;       /* > 0: a token >= vocab_size is OJ_ERR_CORRUPT */
} oj_loader_config;

/* The position of the next batch plus the fields it is only valid for. */
typedef struct oj_loader_state {
    uint64_t seed, epoch, step;
    int64_t n_windows, B, T;
    int32_t rank, world_size;
    int32_t shuffle;
} oj_loader_state;

typedef struct oj_loader oj_loader;

/* world_size 1, dtype OJ_I64, prefetch on, everything else 0/NULL. */
oj_loader_config oj_loader_config_default(void);

/* Open every shard (OJ_ERR_IO / OJ_ERR_CORRUPT as oj_shard_open) and scan
 * its tokens (oj_shard_check_vocab against vocab_size, or against 2^31 when
 * vocab_size is 0), so a bad token stops the run before its first step
 * rather than when its batch comes; OJ_ERR_INVALID_ARGUMENT for a bad
 * config, OJ_ERR_SHAPE when the shards hold fewer than B * world_size
 * windows. */
oj_status oj_loader_open(const oj_loader_config *cfg, oj_loader **out, oj_error *err);
/* Stops the prefetch thread and unmaps the shards. NULL is a no-op. */
void oj_loader_free(oj_loader *L);

/* The next batch as two new tensors [B, T] of the configured dtype on eng's
 * device, owned by eng's current scope; advances the position (to the next
 * epoch after the last step). Returns OJ_OK, or the status recorded on eng
 * (OJ_ERR_CORRUPT for an out-of-vocabulary token, errors of oj_from_host);
 * the position does not advance on error. */
oj_status oj_loader_next(oj_loader *L, oj_engine *eng, oj_tensor **inputs, oj_tensor **targets);
/* The same into host buffers of B * T elements of the configured dtype. */
oj_status oj_loader_next_host(oj_loader *L, void *inputs, void *targets, oj_error *err);

int64_t oj_loader_num_windows(const oj_loader *L);
int64_t oj_loader_steps_per_epoch(const oj_loader *L);
/* The state to save in a checkpoint (position of the next batch). */
void oj_loader_get_state(const oj_loader *L, oj_loader_state *st);
/* Restore a saved state: the following batches equal those that followed
 * when it was saved. OJ_ERR_STATE when B, T, rank, world_size, shuffle or
 * the window count differ from this loader's, or step is past the epoch. */
oj_status oj_loader_set_state(oj_loader *L, const oj_loader_state *st, oj_error *err);

/* The window index at epoch position p (< W) for (seed, epoch), as the
 * shuffled loader uses it; a bijection on [0, n_windows). */
int64_t oj_loader_permute(uint64_t seed, uint64_t epoch, int64_t n_windows, int64_t p);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_DATA_H */
