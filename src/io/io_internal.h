/* Internal helpers of src/io: file mappings, hashing, message formatting,
 * and the in-memory parsers that the fuzz targets drive directly. The
 * file-system steps (core/fs.h) and UTF-8 validation (core/utf8.h) are
 * core's, shared with data and train. */
#ifndef OJAS_IO_INTERNAL_H
#define OJAS_IO_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "core/fs.h"
#include "core/utf8.h"
#include "ojas/io.h"

/* Largest safetensors header accepted (as the reference implementation). */
#define OJ__ST_MAX_HEADER (100u * 1000u * 1000u)
/* Largest JSON file (manifest.json, state.json, latest) read. */
#define OJ__JSON_MAX_BYTES ((size_t)64 << 20)

/* ---------------------------------------------------------------- mapping
 * Bytes of a file kept alive by a reference count: the handle holds one,
 * every zero-copy tensor another. */
typedef enum { OJ__MAP_MMAP, OJ__MAP_HEAP, OJ__MAP_BORROWED } oj__map_kind;

typedef struct oj__mapping {
    atomic_long refcount;
    oj__map_kind kind;
    uint8_t *base;
    size_t len;
} oj__mapping;

/* Map `path` privately (reads; writes copy-on-write, never reach the file).
 * An empty file gives a mapping of length 0. */
oj_status oj__map_file(const char *path, oj__mapping **out, oj_error *err);
/* A mapping over a heap copy of data (copy true) or over data itself
 * (borrowed: the caller keeps it alive longer than the mapping). */
oj_status oj__map_memory(const void *data, size_t len, bool copy, oj__mapping **out,
                         oj_error *err);
void oj__map_retain(oj__mapping *m);
void oj__map_release(oj__mapping *m);

/* ---------------------------------------------------------------- safetensors */
/* The dtypes of the safetensors format; those ojas has no type for carry
 * OJ_DTYPE_COUNT and can be listed but not loaded. */
typedef struct oj__st_dtype {
    const char *name;
    unsigned bits; /* per element */
    oj_dtype dtype;
} oj__st_dtype;
extern const oj__st_dtype oj__st_dtypes[];
extern const int oj__st_dtype_count;

typedef struct oj__st_tensor {
    char *name;
    size_t name_len;
    int dtype; /* index into oj__st_dtypes */
    int rank;
    int64_t *shape;
    uint64_t begin, end; /* byte offsets into the data section */
} oj__st_tensor;

struct oj_safetensors {
    oj__mapping *map;
    const uint8_t *data; /* data section */
    uint64_t data_len;
    int64_t n;
    oj__st_tensor *t; /* sorted by name */
    int64_t n_meta;
    char **meta_key, **meta_value; /* sorted by key */
};

/* The rule the reader applies to shapes: the product of the dims, zeros
 * counted as 1, times `bits` per element, fits in 63 bits (so strides and
 * byte counts never overflow, even for empty tensors). */
bool oj__shape_span_ok(int rank, const int64_t *shape, unsigned bits);
/* Parse and validate the safetensors bytes of m (retained by the handle on
 * success). `what` names the file in messages ("model.safetensors"). */
oj_status oj__st_parse(oj__mapping *m, const char *what, oj_safetensors **out, oj_error *err);
/* Write a complete safetensors file to fd (`path` names it in messages);
 * if hash is not NULL every byte written is also fed to it (an
 * XXH3_state_t*). The tensors are entries[0..n), or when `tensors` is not
 * NULL, tensors[i] under names[i]. */
oj_status oj__st_write_fd(int fd, const char *path, int64_t n, const oj_safetensors_entry *entries,
                          const char *const *names, oj_tensor *const *tensors,
                          const char *const *metadata, void *hash, oj_error *err);
/* Create `path` exclusively, write it as oj__st_write_fd does, fsync and
 * close it (no rename). On failure the partial file is removed. */
oj_status oj__st_write_file(const char *path, int64_t n, const oj_safetensors_entry *entries,
                            const char *const *names, oj_tensor *const *tensors,
                            const char *const *metadata, void *hash, oj_error *err);

/* ---------------------------------------------------------------- checkpoints */
/* What a checkpoint must hold: for each name, a dtype and shape. */
typedef struct oj__expect {
    int64_t n;
    const char *const *names;
    const oj_dtype *dtypes;
    const int *ranks;
    const int64_t (*shapes)[OJ_MAX_RANK];
} oj__expect;

/* The four files of a checkpoint, in memory. */
typedef struct oj__ckpt_bytes {
    const uint8_t *manifest, *state, *model, *optim;
    size_t manifest_len, state_len, model_len, optim_len;
} oj__ckpt_bytes;

/* Validate a checkpoint held in memory: manifest, sizes and hashes (unless
 * check_hashes is false: the fuzz target reaches deeper that way), state,
 * both safetensors files, and, when model/optim expectations are given,
 * names, dtypes and shapes. On success *model_st / *optim_st (either may be
 * NULL when not wanted) own parsed handles borrowing the bytes, *step and
 * *state_json (malloc'd, may be NULL when not wanted) are set. */
oj_status oj__ckpt_validate(const oj__ckpt_bytes *b, bool check_hashes, const oj__expect *model,
                            const oj__expect *optim, int64_t *step, char **state_json,
                            oj_safetensors **model_st, oj_safetensors **optim_st,
                            oj_error *err);
/* File names inside a checkpoint directory, in manifest order. */
enum { OJ__CKPT_MODEL = 0, OJ__CKPT_OPTIM = 1, OJ__CKPT_STATE = 2, OJ__CKPT_NFILES = 3 };
extern const char *const oj__ckpt_files[OJ__CKPT_NFILES];
#define OJ__CKPT_MANIFEST "manifest.json"
#define OJ__CKPT_FORMAT "ojas-checkpoint"
#define OJ__CKPT_FORMAT_VERSION 1

/* state.json text: {"step": step, "ojas_version": ..., <caller_json keys>}.
 * caller_json NULL or a JSON object without the reserved keys
 * (OJ_ERR_INVALID_ARGUMENT otherwise). *out is malloc'd. */
oj_status oj__ckpt_state_text(int64_t step, const char *caller_json, char **out, oj_error *err);
/* manifest.json text for the files' byte sizes and XXH3-64 hashes. */
oj_status oj__ckpt_manifest_text(int64_t step, const uint64_t bytes[OJ__CKPT_NFILES],
                                 const uint64_t hashes[OJ__CKPT_NFILES], char **out,
                                 oj_error *err);
/* "ckpt-000123" into buf: at least 6 digits. */
void oj__ckpt_dirname(int64_t step, char buf[32]);
/* "ckpt-000123" -> 123; false for anything that oj__ckpt_dirname would
 * not have written (signs, spaces, extra zeros, overflow). */
bool oj__ckpt_parse_dirname(const char *name, size_t len, int64_t *step);
/* Contents of a `latest` file -> step; false unless "ckpt-<digits>" with at
 * most one trailing newline. */
bool oj__ckpt_parse_latest(const uint8_t *buf, size_t len, int64_t *step);

/* Test hook: when > 0, oj_checkpoint_save stops dead (as a crash would,
 * leaving what it wrote) just before its crash_point-th durable step and
 * returns OJ_ERR_IO. Tests only; not thread-safe. */
extern int oj__ckpt_crash_point;

/* ---------------------------------------------------------------- hash */
/* XXH3 64-bit (seed 0) of len bytes. */
uint64_t oj__xxh3(const void *data, size_t len);

/* ---------------------------------------------------------------- text */
/* A short printable rendition of s[0..len) for messages, in double quotes,
 * with control and non-UTF-8 bytes as \xNN, cut with "..." to fit. */
const char *oj__quote(char *buf, size_t size, const char *s, size_t len);
/* Put `prefix` before the message already in err (cut to fit). */
void oj__error_prefix(oj_error *err, const char *prefix);

#endif /* OJAS_IO_INTERNAL_H */
