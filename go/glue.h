/* C helpers of the Go package: work that takes several C calls (and C
 * callbacks) on one side of the cgo boundary. */
#ifndef OJAS_GO_GLUE_H
#define OJAS_GO_GLUE_H

#include <stdint.h>

#include <ojas/ojas.h>

/* The model a checkpoint holds, built on eng: `path` is a checkpoint
 * directory or a run directory (the checkpoint oj_checkpoint_find
 * chooses); its training config gives the model config (the vocabulary of
 * its tokenizer_dir when the run had one, as `ojas generate`), the weights
 * are loaded into a new model. *out owned by the caller (oj_gpt_free). */
oj_status ojas_go_load_checkpoint(oj_engine *eng, const char *path, oj_gpt **out, oj_error *err);

/* oj_generate of one prompt, each token passed to the Go callback
 * ojasGoOnToken with ctx `handle` (a cgo.Handle). */
oj_status ojas_go_generate(oj_gpt *m, const int32_t *prompt, int64_t n,
                           const oj_sampler_config *cfg, uintptr_t handle, int32_t **out,
                           int64_t *out_len);

/* Open a trainer; log_stderr: progress lines to stderr, else silent. */
oj_status ojas_go_trainer_create(const oj_train_config *cfg, const char *out_dir,
                                 const char *resume, int overwrite, int log_stderr,
                                 oj_trainer **out, oj_error *err);

/* Per-handle C scratch for the results of the calls below: allocated
 * once, so a call allocates nothing on the Go heap for them. */
typedef struct ojas_go_scratch {
    oj_error err;
    size_t n;
    int32_t token;
} ojas_go_scratch;

/* Encode text[0..len) into ids[0..cap) with one call across cgo: returns
 * the number of ids in *n (more than cap: only cap were written, call
 * again with room for *n). */
oj_status ojas_go_encode(const oj_tokenizer *tok, const char *text, size_t len, unsigned flags,
                         int32_t *ids, size_t cap, size_t *n, oj_error *err);
/* Decode ids[0..n) into buf[0..cap) likewise: *len bytes. */
oj_status ojas_go_decode(const oj_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                         char *buf, size_t cap, size_t *len, oj_error *err);

/* For the benchmarks of the cgo boundary (bench.go): the same calls as
 * Tokenizer.Encode and Decoder.Step, `iters` times in a C loop. Return the
 * first failing status (OJ_OK when all succeeded). */
oj_status ojas_go_encode_loop(const oj_tokenizer *tok, const char *text, size_t len,
                              int64_t iters);
oj_status ojas_go_decode_step_loop(oj_gpt_decoder *d, int64_t iters);
#endif
