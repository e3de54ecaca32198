/* ojas gguf: read and write GGUF files, llama.cpp's model format
 * (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
 *
 * Layout (all little-endian): magic "GGUF", u32 version (2 or 3 read, 3
 * written), u64 tensor count, u64 metadata count; the metadata, each a key
 * (string: u64 length + UTF-8 bytes), a u32 value type and the value; the
 * tensor infos, each a name (string), u32 n_dims (1..4), n_dims u64 dims
 * (ggml order: dims[0] is the fastest-varying, so a row-major [N, K] matrix
 * has dims {K, N}), u32 ggml type and u64 offset into the data section;
 * padding to the alignment (metadata general.alignment, a u32 power of
 * two, else 32); the data section, each tensor at its offset, padded to
 * the alignment.
 *
 * Strict reading (each failure OJ_ERR_CORRUPT with a one-line message that
 * names the key or tensor, and the byte offset): a wrong magic or
 * unsupported version; any count, length or size that runs past the end of
 * the file; keys empty, longer than 65535 bytes, not UTF-8 or repeated; an
 * unknown value type; nested arrays; a bool that is not 0 or 1;
 * general.alignment not a u32 power of two; tensor names empty, of 64 bytes
 * or more (llama.cpp's limit), not UTF-8 or repeated; n_dims outside 1..4;
 * a dim of 0 or above 2^63, or an element count that overflows; an unknown
 * ggml type; dims[0] not a multiple of the type's block size; offsets that
 * are not the tensors laid out in order, each padded to the alignment (as
 * llama.cpp writes and requires); a file shorter than the data section or
 * longer than it plus its last padding. Reading runs over a mapping of
 * the file (or a copy of the bytes given); nothing is allocated in
 * proportion to a count before that count has been checked against the
 * bytes left. */
#ifndef OJAS_GGUF_H
#define OJAS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types (the numbers of the file format). */
typedef enum oj_gguf_type {
    OJ_GGUF_UINT8 = 0,
    OJ_GGUF_INT8 = 1,
    OJ_GGUF_UINT16 = 2,
    OJ_GGUF_INT16 = 3,
    OJ_GGUF_UINT32 = 4,
    OJ_GGUF_INT32 = 5,
    OJ_GGUF_FLOAT32 = 6,
    OJ_GGUF_BOOL = 7,
    OJ_GGUF_STRING = 8,
    OJ_GGUF_ARRAY = 9,
    OJ_GGUF_UINT64 = 10,
    OJ_GGUF_INT64 = 11,
    OJ_GGUF_FLOAT64 = 12,
    OJ_GGUF_TYPE_COUNT
} oj_gguf_type;

/* "uint8", ..., "float64"; "invalid" otherwise. */
const char *oj_gguf_type_name(oj_gguf_type t);
/* Bytes of one scalar of type t (0 for STRING, ARRAY, invalid). */
size_t oj_gguf_type_size(oj_gguf_type t);

/* ggml tensor types that ojas loads (the numbers of ggml.h's ggml_type);
 * a file may hold any ggml type: those are listed and validated but not
 * loaded. */
enum {
    OJ_GGML_F32 = 0,
    OJ_GGML_F16 = 1,
    OJ_GGML_Q4_0 = 2,
    OJ_GGML_Q4_1 = 3,
    OJ_GGML_Q8_0 = 8,
    OJ_GGML_Q4_K = 12,
    OJ_GGML_BF16 = 30,
};
/* ggml's name of a tensor type ("F32", "Q8_0", "Q4_K", ...) or NULL for a
 * number ggml does not define. */
const char *oj_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block of a ggml type (1 and the element
 * size for F32/F16/BF16); false for an unknown type. */
bool oj_ggml_type_block(uint32_t type, int64_t *block_elems, int64_t *block_bytes);

/* ---------------------------------------------------------------- reading */

/* An open, validated GGUF file. Metadata and tensors keep file order. */
typedef struct oj_gguf oj_gguf;

/* Open and validate `path` (rules above). On success *out owns a new
 * handle (oj_gguf_close); on failure *out is NULL and err (may be NULL)
 * holds OJ_ERR_CORRUPT, OJ_ERR_IO (cannot open or map; not a regular
 * file) or OJ_ERR_CAPACITY. */
oj_status oj_gguf_open(const char *path, oj_gguf **out, oj_error *err);
/* The same over `len` bytes at `data` (copied; the caller keeps data). */
oj_status oj_gguf_open_memory(const void *data, size_t len, oj_gguf **out, oj_error *err);
/* Free the handle; tensors made from it stay valid. NULL is a no-op. */
void oj_gguf_close(oj_gguf *g);

uint32_t oj_gguf_version(const oj_gguf *g);
/* The alignment of the data section (general.alignment or 32). */
uint32_t oj_gguf_alignment(const oj_gguf *g);

/* Metadata entries 0..count-1, in file order. Out-of-range i gives NULL,
 * OJ_GGUF_TYPE_COUNT, false or 0. */
int64_t oj_gguf_kv_count(const oj_gguf *g);
/* Key i (NUL-terminated, owned by g). */
const char *oj_gguf_kv_key(const oj_gguf *g, int64_t i);
/* Index of `key`, or -1. */
int64_t oj_gguf_find_key(const oj_gguf *g, const char *key);
oj_gguf_type oj_gguf_kv_type(const oj_gguf *g, int64_t i);
/* A scalar integer or bool value as int64 (false when the value is not an
 * integer or bool, or is a uint64 above INT64_MAX). */
bool oj_gguf_kv_int(const oj_gguf *g, int64_t i, int64_t *out);
/* A uint64 value, or any non-negative integer value. */
bool oj_gguf_kv_uint(const oj_gguf *g, int64_t i, uint64_t *out);
/* A float32 or float64 value as double. */
bool oj_gguf_kv_float(const oj_gguf *g, int64_t i, double *out);
/* A string value: NUL-terminated (owned by g; may hold NUL bytes, *len
 * says how many bytes, when len is not NULL); NULL for another type. */
const char *oj_gguf_kv_str(const oj_gguf *g, int64_t i, size_t *len);
/* An array value: element type and length (OJ_GGUF_TYPE_COUNT / -1 for a
 * value that is not an array). */
oj_gguf_type oj_gguf_kv_array_type(const oj_gguf *g, int64_t i);
int64_t oj_gguf_kv_array_len(const oj_gguf *g, int64_t i);
/* The raw little-endian elements of a numeric or bool array (len * size
 * bytes, inside the file; unaligned), NULL for a string array. */
const void *oj_gguf_kv_array_data(const oj_gguf *g, int64_t i);
/* Element j of a string array (NUL-terminated, owned by g), NULL otherwise. */
const char *oj_gguf_kv_array_str(const oj_gguf *g, int64_t i, int64_t j, size_t *len);

/* Tensor infos 0..count-1, in file order. */
int64_t oj_gguf_tensor_count(const oj_gguf *g);
const char *oj_gguf_tensor_name(const oj_gguf *g, int64_t i);
/* Index of `name`, or -1. */
int64_t oj_gguf_find_tensor(const oj_gguf *g, const char *name);
/* ggml type number of tensor i (oj_ggml_type_name names it); UINT32_MAX
 * out of range. */
uint32_t oj_gguf_tensor_type(const oj_gguf *g, int64_t i);
/* n_dims (1..4) and dims in ggml order (owned by g); 0 / NULL out of range. */
int oj_gguf_tensor_ndims(const oj_gguf *g, int64_t i);
const uint64_t *oj_gguf_tensor_dims(const oj_gguf *g, int64_t i);
/* Offset of tensor i in the data section. */
uint64_t oj_gguf_tensor_offset(const oj_gguf *g, int64_t i);
/* Its bytes in the file (valid while g is open), *nbytes set when not NULL. */
const void *oj_gguf_tensor_data(const oj_gguf *g, int64_t i, size_t *nbytes);

/* Tensor `name` of type F32, F16 or BF16 as an ojas tensor of that dtype on
 * eng's device, owned by the current scope, with the dims reversed into a
 * row-major shape (dims {K, N} -> [N, K]); the bytes are copied. NULL with,
 * recorded on eng: OJ_ERR_OUT_OF_RANGE (no such name), OJ_ERR_UNSUPPORTED
 * (a quantized or other type: quantized ones load with oj_gguf_qtensor,
 * quant.h), OJ_ERR_CAPACITY. */
oj_tensor *oj_gguf_tensor(const oj_gguf *g, oj_engine *eng, const char *name);

/* ---------------------------------------------------------------- writing */

/* A GGUF file being assembled: metadata and tensors are added in the order
 * they will appear, then written at once. Tensor data is borrowed: it must
 * stay valid until oj_gguf_writer_write returns. Every add function checks
 * its arguments and returns OJ_ERR_INVALID_ARGUMENT (recorded in err, may
 * be NULL) for an empty, non-UTF-8 or repeated key or name, a name of 64
 * bytes or more, an unknown type, dims that the reader would refuse, or
 * nbytes that differ from what the type and dims take; OJ_ERR_CAPACITY
 * when out of memory. A writer that refused an add is still usable. */
typedef struct oj_gguf_writer oj_gguf_writer;

/* A new empty writer (NULL when out of memory); alignment 32 unless a
 * general.alignment u32 is added. */
oj_gguf_writer *oj_gguf_writer_new(void);
void oj_gguf_writer_free(oj_gguf_writer *w);

/* A scalar value of type t (not STRING or ARRAY) from `value`, which
 * points at a C value of that type (uint8_t ... double, bool as uint8_t
 * 0/1). general.alignment must be a UINT32 power of two. */
oj_status oj_gguf_writer_set(oj_gguf_writer *w, const char *key, oj_gguf_type t,
                             const void *value, oj_error *err);
/* A string value (NUL-terminated UTF-8). */
oj_status oj_gguf_writer_set_str(oj_gguf_writer *w, const char *key, const char *value,
                                 oj_error *err);
/* An array of n scalars of type t (not STRING or ARRAY) from `values`
 * (n C values of that type), copied. */
oj_status oj_gguf_writer_set_array(oj_gguf_writer *w, const char *key, oj_gguf_type t,
                                   int64_t n, const void *values, oj_error *err);
/* An array of n strings, copied. */
oj_status oj_gguf_writer_set_str_array(oj_gguf_writer *w, const char *key, int64_t n,
                                       const char *const *values, oj_error *err);
/* Whether key has been set on w. */
bool oj_gguf_writer_has(const oj_gguf_writer *w, const char *key);
/* A tensor: ggml `type`, n_dims 1..4 dims in ggml order, nbytes of data
 * (borrowed) exactly as the type and dims take. */
oj_status oj_gguf_writer_add_tensor(oj_gguf_writer *w, const char *name, uint32_t type,
                                    int n_dims, const uint64_t *dims, const void *data,
                                    size_t nbytes, oj_error *err);
/* Write the file atomically (a temporary sibling, fsync, rename, fsync of
 * the directory), version 3, tensors laid out in the order added, each at
 * an offset that is a multiple of the alignment. OJ_ERR_IO naming the step
 * and path (the old file, if any, is left as it was). */
oj_status oj_gguf_writer_write(const oj_gguf_writer *w, const char *path, oj_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_GGUF_H */
