/* The GGUF metadata value types and ggml's tensor types: names, sizes and
 * block layouts (ggml.h's ggml_type numbers, ggml-common.h's block
 * structs). */
#include "io/gguf_internal.h"

static const char *const value_names[OJ_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64"};
static const size_t value_sizes[OJ_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *oj_gguf_type_name(oj_gguf_type t) {
    return (unsigned)t < OJ_GGUF_TYPE_COUNT ? value_names[t] : "invalid";
}

size_t oj_gguf_type_size(oj_gguf_type t) {
    return (unsigned)t < OJ_GGUF_TYPE_COUNT ? value_sizes[t] : 0;
}

/* Numbers ggml retired (4, 5, 31..33) and those past the table are unknown. */
static const struct {
    const char *name;
    int block, bytes;
} ggml_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};

const char *oj_ggml_type_name(uint32_t type) {
    return type < sizeof ggml_types / sizeof ggml_types[0] ? ggml_types[type].name : NULL;
}

bool oj_ggml_type_block(uint32_t type, int64_t *block_elems, int64_t *block_bytes) {
    if (oj_ggml_type_name(type) == NULL) return false;
    if (block_elems) *block_elems = ggml_types[type].block;
    if (block_bytes) *block_bytes = ggml_types[type].bytes;
    return true;
}

bool oj__ggml_nbytes(uint32_t type, int n_dims, const uint64_t *dims, uint64_t *nbytes) {
    int64_t be, bb;
    if (!oj_ggml_type_block(type, &be, &bb) || n_dims < 1 || n_dims > OJ__GGUF_MAX_DIMS)
        return false;
    if (dims[0] % (uint64_t)be) return false;
    /* rows of blocks: (dims[0] / block) * bytes, times the other dims */
    unsigned __int128 n = (unsigned __int128)(dims[0] / (uint64_t)be) * (uint64_t)bb;
    for (int d = 1; d < n_dims; d++) {
        n *= dims[d];
        if (n > (unsigned __int128)INT64_MAX) return false;
    }
    if (n > (unsigned __int128)INT64_MAX) return false;
    *nbytes = (uint64_t)n;
    return true;
}
