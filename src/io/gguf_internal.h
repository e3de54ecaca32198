/* What the GGUF reader, writer and fuzz target share (internal). */
#ifndef OJAS_GGUF_INTERNAL_H
#define OJAS_GGUF_INTERNAL_H

#include "io/io_internal.h"
#include "ojas/gguf.h"

#define OJ__GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define OJ__GGUF_DEFAULT_ALIGNMENT 32u
#define OJ__GGUF_MAX_DIMS 4
#define OJ__GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME, the NUL included */
#define OJ__GGUF_MAX_KEY 65535

typedef struct oj__gguf_kv {
    char *key;
    oj_gguf_type type;
    /* scalars: raw points at the value in the mapping; numeric arrays: at
     * the first element */
    const uint8_t *raw;
    oj_gguf_type arr_type; /* OJ_GGUF_TYPE_COUNT unless an array */
    int64_t arr_len;
    char *str;       /* a string value, NUL-terminated copy */
    size_t str_len;
    char **strs;     /* a string array: pointers into strbuf */
    size_t *str_lens;
    char *strbuf;
} oj__gguf_kv;

typedef struct oj__gguf_tensor {
    char *name;
    int n_dims;
    uint64_t dims[OJ__GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t offset, nbytes;
} oj__gguf_tensor;

struct oj_gguf {
    oj__mapping *map;
    uint32_t version, alignment;
    int64_t n_kv, n_tensors;
    oj__gguf_kv *kv;
    oj__gguf_tensor *t;
    const uint8_t *data; /* data section */
};

/* Parse and validate the GGUF bytes of m (retained by the handle on
 * success); `what` names the file in messages. */
oj_status oj__gguf_parse(oj__mapping *m, const char *what, oj_gguf **out, oj_error *err);
/* The raw bytes of scalar kv i (little-endian, unaligned), NULL when i is
 * out of range or the value is a string or array. */
const void *oj__gguf_kv_raw(const oj_gguf *g, int64_t i);
/* Bytes of a tensor of ggml type `type` with these dims: false when the
 * type is unknown, dims[0] is not a multiple of the block, or the count
 * overflows 63 bits. */
bool oj__ggml_nbytes(uint32_t type, int n_dims, const uint64_t *dims, uint64_t *nbytes);

#endif /* OJAS_GGUF_INTERNAL_H */
