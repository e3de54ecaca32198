/* ojas io: safetensors files and crash-safe checkpoint directories.
 *
 * Functions here run without an engine unless they produce tensors; they
 * report failures through an oj_error (may be NULL) and return its status.
 * Malformed files are OJ_ERR_CORRUPT with a message that names the file
 * part and, where there is one, the tensor; failed system calls are
 * OJ_ERR_IO with the path and strerror. The format rules enforced are
 * listed in docs/formats.md. */
#ifndef OJAS_IO_H
#define OJAS_IO_H

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- safetensors
 * Layout (https://github.com/huggingface/safetensors): u64 little-endian
 * header length N, N bytes of UTF-8 JSON (padded with spaces), then the
 * data section. The header maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (byte offsets into the data section) and
 * may hold "__metadata__", a map of strings to strings. */

/* An open safetensors file: a validated header over the file's bytes
 * (mapped read-only, copy-on-write). Tensors are indexed 0..count-1 in
 * byte-wise name order. */
typedef struct oj_safetensors oj_safetensors;

/* Open and validate `path`. Strict: a header length beyond the file, a
 * header that is not a UTF-8 JSON object, a duplicate or non-UTF-8 name,
 * an unknown dtype, a shape whose byte count differs from its offsets,
 * offsets out of range, overlapping or leaving a gap, and bytes after the
 * last tensor are all OJ_ERR_CORRUPT. On success *out owns a new handle
 * (oj_safetensors_close); on failure *out is NULL. OJ_ERR_IO when the file
 * cannot be opened or mapped, OJ_ERR_CAPACITY when out of host memory. */
oj_status oj_safetensors_open(const char *path, oj_safetensors **out, oj_error *err);
/* The same over `len` bytes at `data`, which are copied (the caller keeps
 * ownership of `data`). */
oj_status oj_safetensors_open_memory(const void *data, size_t len, oj_safetensors **out,
                                     oj_error *err);
/* Drop the handle. Tensors made by oj_safetensors_tensor stay valid: the
 * mapping is unmapped when the last of them is released. NULL is a no-op. */
void oj_safetensors_close(oj_safetensors *st);

/* Number of tensors (0 for NULL). */
int64_t oj_safetensors_count(const oj_safetensors *st);
/* Name of tensor i (NUL-terminated UTF-8, owned by st); NULL out of range. */
const char *oj_safetensors_name(const oj_safetensors *st, int64_t i);
/* Index of `name`, or -1. O(log count). */
int64_t oj_safetensors_find(const oj_safetensors *st, const char *name);
/* ojas dtype of tensor i; OJ_DTYPE_COUNT for a dtype that safetensors
 * defines but ojas has no type for (I8, I16, U64, F8_*, C64, F4, F6_*) and
 * for i out of range. */
oj_dtype oj_safetensors_dtype(const oj_safetensors *st, int64_t i);
/* The dtype as written in the file ("F32", "BF16", "I8", ...); NULL out of
 * range. */
const char *oj_safetensors_dtype_str(const oj_safetensors *st, int64_t i);
/* Rank of tensor i (may exceed OJ_MAX_RANK in a foreign file); -1 out of
 * range. */
int oj_safetensors_rank(const oj_safetensors *st, int64_t i);
/* Its `rank` dims, owned by st; NULL out of range. */
const int64_t *oj_safetensors_shape(const oj_safetensors *st, int64_t i);
/* Raw little-endian bytes of tensor i in the file (row-major); *nbytes set
 * when nbytes is not NULL. Valid while st is open. NULL out of range. */
const void *oj_safetensors_data(const oj_safetensors *st, int64_t i, size_t *nbytes);

/* "__metadata__" entries, in byte-wise key order. */
int64_t oj_safetensors_metadata_count(const oj_safetensors *st);
const char *oj_safetensors_metadata_key(const oj_safetensors *st, int64_t i);
const char *oj_safetensors_metadata_value(const oj_safetensors *st, int64_t i);
/* Value for `key`, or NULL. */
const char *oj_safetensors_metadata_get(const oj_safetensors *st, const char *key);

/* Tensor `name` on eng's device, owned by the current scope. On a CPU
 * engine it is zero-copy: the tensor's storage is the mapped file (private:
 * writes to it never reach the file) and keeps the mapping alive after
 * oj_safetensors_close; the bytes are copied only when the file places the
 * tensor at an address not aligned to its element size. On another device
 * the bytes are copied there. NULL with, recorded on eng:
 * OJ_ERR_INVALID_ARGUMENT (NULL st/name), OJ_ERR_OUT_OF_RANGE (no such
 * name), OJ_ERR_UNSUPPORTED (dtype without an ojas type, rank > 8),
 * OJ_ERR_CAPACITY. */
oj_tensor *oj_safetensors_tensor(oj_safetensors *st, oj_engine *eng, const char *name);

/* The safetensors spelling of an ojas dtype ("F32", "BOOL", ...), or NULL. */
const char *oj_safetensors_dtype_to_str(oj_dtype dt);

/* One tensor to write from host memory: `data` holds numel * dtype size
 * bytes, row-major, little-endian. */
typedef struct oj_safetensors_entry {
    const char *name; /* non-empty UTF-8, unique in the file */
    oj_dtype dtype;
    int rank; /* 0..OJ_MAX_RANK */
    const int64_t *shape;
    const void *data; /* may be NULL when the tensor has no elements */
} oj_safetensors_entry;

/* Write `n` entries to `path` atomically: into a temporary sibling, fsync,
 * rename over `path`, fsync the directory, so a reader sees the old file or
 * the whole new one. Header keys are sorted byte-wise ("__metadata__"
 * first), padded with spaces so the data section starts 8-byte aligned;
 * tensor data is laid out by element size (largest first) then name, so
 * every tensor is aligned to its element size, with no gaps (as the
 * safetensors library requires). `metadata` is NULL or a NULL-terminated
 * array of key, value, key, value, ... UTF-8 strings (keys unique).
 * OJ_ERR_INVALID_ARGUMENT for a bad name, duplicate, dtype or shape,
 * OJ_ERR_OUT_OF_RANGE when the header would exceed the 100,000,000 bytes
 * that oj_safetensors_open (and the reference reader) accept, OJ_ERR_IO
 * when writing fails (the old file, if any, is left as it was). */
oj_status oj_safetensors_write(const char *path, int64_t n, const oj_safetensors_entry *entries,
                               const char *const *metadata, oj_error *err);

/* Save tensors (any device, any strides; copied to the host one at a time)
 * under `names` as oj_safetensors_write does. A NULL or released tensor is
 * OJ_ERR_INVALID_ARGUMENT. */
oj_status oj_safetensors_save(const char *path, int64_t n, const char *const *names,
                              oj_tensor *const *tensors, const char *const *metadata,
                              oj_error *err);

/* ---------------------------------------------------------------- checkpoints
 * A checkpoint of step S lives in <root>/ckpt-<S, at least 6 digits>/:
 *   model.safetensors      the model's named tensors
 *   optimizer.safetensors  the optimizer's named tensors (may be empty)
 *   state.json             {"step": S, "ojas_version": "...", <caller keys>}
 *   manifest.json          format, step, and per file its size and XXH3-64
 * and <root>/latest names the newest one ("ckpt-000100\n"). A checkpoint is
 * written into a hidden temporary sibling, every file and the directory are
 * fsynced, then it is renamed into place and `latest` is replaced
 * atomically: a crash at any point leaves the previous checkpoint whole and
 * loadable. One writer per root (the trainer holds a lock on its run
 * directory, see train.h). */

/* Tensors under dotted names, e.g. a model's state_dict. */
typedef struct oj_named_tensors {
    int64_t n;
    const char *const *names;
    oj_tensor *const *tensors;
} oj_named_tensors;

/* Write the checkpoint of `step` (>= 0) under `root` (created if missing;
 * its parent must exist). model: required; optim: NULL for none.
 * state_json: NULL or a JSON object whose keys (e.g. RNG counters, data
 * position, config) are stored in state.json beside "step" and
 * "ojas_version" (reserved keys: OJ_ERR_INVALID_ARGUMENT). A checkpoint of
 * the same step is replaced atomically. Then only the `keep_last` newest
 * checkpoints (by step, always including this one) are kept; 0 keeps all.
 * Stale temporaries of crashed writers are removed. OJ_ERR_IO on a failed
 * system call (nothing that was loadable before becomes unloadable); if
 * only the removal of old checkpoints fails, the new one is in place and
 * the message says "saved, but removing old ones failed". */
oj_status oj_checkpoint_save(const char *root, int64_t step, const oj_named_tensors *model,
                             const oj_named_tensors *optim, const char *state_json,
                             int keep_last, oj_error *err);

/* What a load found. */
typedef struct oj_checkpoint_info {
    int64_t step;
    char *state_json; /* state.json's text, malloc'd: free() it (NULL on failure) */
    char dir[4096];   /* the checkpoint directory loaded */
    int skipped;      /* oj_checkpoint_resume: newer checkpoints refused */
} oj_checkpoint_info;

/* Load the checkpoint directory `dir` into live tensors. Everything is
 * validated first: manifest, sizes and XXH3-64 hashes of every file,
 * state.json, both safetensors files, and that the names, dtypes and shapes
 * in the files equal those of `model` and `optim` (optim NULL: the
 * optimizer file is validated but not loaded). Only then are the bytes
 * copied into the tensors (bumping their versions); a failed load changes
 * no tensor. Tensors on a device other than the host are staged there
 * first (transiently doubling their memory). Errors: OJ_ERR_CORRUPT
 * (malformed or hash mismatch), OJ_ERR_SHAPE (a tensor missing, extra or of
 * another shape), OJ_ERR_DTYPE, OJ_ERR_IO, OJ_ERR_INVALID_ARGUMENT
 * (duplicate or NULL names/tensors), OJ_ERR_CAPACITY. `info` may be NULL. */
oj_status oj_checkpoint_load(const char *dir, const oj_named_tensors *model,
                             const oj_named_tensors *optim, oj_checkpoint_info *info,
                             oj_error *err);

/* Load the newest good checkpoint under `root`: the one `latest` names,
 * then the others by decreasing step, skipping those refused as
 * OJ_ERR_CORRUPT or OJ_ERR_IO (counted in info->skipped). Any other error
 * (a model that does not match) stops the search. OJ_ERR_IO when root is
 * missing or holds no checkpoint; when all are refused, the newest one's
 * status, the message saying "no good checkpoint found under <root>, all
 * N refused" and then each one's reason ("; ckpt-NNNNNN refused: ...",
 * newest first, cut to fit). */
oj_status oj_checkpoint_resume(const char *root, const oj_named_tensors *model,
                               const oj_named_tensors *optim, oj_checkpoint_info *info,
                               oj_error *err);

/* The checkpoint directory that oj_checkpoint_resume(path, ...) would load,
 * without loading it: `path` itself when it is a checkpoint directory
 * (holding manifest.json; verified), else the first under the root `path`
 * that passes oj_checkpoint_verify, in oj_checkpoint_resume's order (the
 * one `latest` names, then by decreasing step). Copied into dir (len
 * bytes); *skipped (may be NULL) counts the newer ones refused and
 * *refused (may be NULL) gets the newest refused one's error. Errors as
 * oj_checkpoint_resume's (every candidate refused: the newest one's status
 * and each one's reason); OJ_ERR_OUT_OF_RANGE when dir is too small.
 * Callers that read a checkpoint's state.json and then load its tensors use
 * this once so that both come from the same checkpoint. */
oj_status oj_checkpoint_find(const char *path, char *dir, size_t len, int *skipped,
                             oj_error *refused, oj_error *err);

/* Move the checkpoints steps[0..n) under root into root/aside/ (created;
 * even when n is 0; an existing name is an error), then point `latest` at the newest
 * checkpoint left under root (removed when none is left), fsyncing both
 * directories. A crash midway leaves every checkpoint whole, under root or
 * under aside. `aside` is one path component. OJ_ERR_IO on a failed system
 * call, OJ_ERR_INVALID_ARGUMENT for a bad name. */
oj_status oj_checkpoint_move_aside(const char *root, const int64_t *steps, int64_t n,
                                   const char *aside, oj_error *err);

/* Validate the checkpoint directory `dir` (manifest, hashes, JSON,
 * safetensors structure) without loading it. */
oj_status oj_checkpoint_verify(const char *dir, oj_error *err);

/* Steps of the complete checkpoint directories under root, ascending, into
 * a malloc'd array (*steps, free() it; NULL when *n is 0). Temporaries and
 * other names are ignored; the directories are not validated. */
oj_status oj_checkpoint_list(const char *root, int64_t **steps, int64_t *n, oj_error *err);

/* Step named by <root>/latest. OJ_ERR_IO if there is none, OJ_ERR_CORRUPT
 * if it does not hold "ckpt-<digits>". */
oj_status oj_checkpoint_latest(const char *root, int64_t *step, oj_error *err);

/* "<root>/ckpt-000123" into buf (len bytes). OJ_ERR_OUT_OF_RANGE when it
 * does not fit or step < 0. */
oj_status oj_checkpoint_path(const char *root, int64_t step, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_IO_H */
