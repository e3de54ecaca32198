/* ojas quant: block-quantized weight types (llama.cpp / GGUF bit layouts),
 * quantize and dequantize, and the fused dequantizing matmul of the CPU.
 *
 * Formats, each a row of K elements (K a multiple of 32) stored as K / 32
 * blocks of 32, byte for byte as ggml's (ggml-common.h) so GGUF files carry
 * them unchanged; d and m are IEEE f16, little-endian:
 *   q8_0  34 bytes: d, int8 q[32];              x[j] = d * q[j]
 *   q4_0  18 bytes: d, uint8 qs[16];            x[j] = d * (nibble(j) - 8)
 *   q4_1  20 bytes: d, m, uint8 qs[16];         x[j] = d * nibble(j) + m
 * where nibble(j) is the low 4 bits of qs[j] for j < 16 and the high 4 bits
 * of qs[j - 16] for j >= 16.
 *   q4_k  144 bytes per super-block of 256 (ggml's block_q4_K): d, dmin
 *         (f16), scales[12] (eight 6-bit scales sc and eight 6-bit mins m,
 *         packed as get_scale_min_k4 reads them), qs[128]; sub-block s of
 *         32 (s = 0..7) has x[j] = d * sc[s] * q(j) - dmin * m[s], q(j) the
 *         low nibbles of qs[32 (s / 2) ..] for even s, the high ones for odd s.
 * Quantization rounds as ggml's reference quantizers (quantize_row_q8_0_ref,
 * _q4_0_ref, _q4_1_ref, _q4_K_ref in ggml-quants.c), so ojas and llama.cpp
 * write the same bytes for the same f32 row (tests/reference/test_quant.py
 * checks this against an independent numpy port).
 *   fp8   (OJ_FP8_E4M3, not a ggml type: GGUF refuses it) one scale a row:
 *         16 + K bytes, s (f32, little-endian), 12 zero bytes, then K bytes
 *         of OCP FP8 E4M3 (sign, 4 exponent bits biased by 7, 3 mantissa
 *         bits; subnormals m 2^-9; no infinities, S.1111.111 is NaN; the
 *         largest value 448): x[j] = s * e4m3(q[j]). Quantization: s =
 *         amax / 448 (f32; 0 for a zero row, every q 0 then), q[j] = x[j] /
 *         s (f32) rounded to the nearest E4M3 value, ties to the even
 *         mantissa, saturated at +-448 (tests/reference/test_quant.py
 *         checks the bytes against a numpy rounding). Its "blocks" are 32
 *         bytes of 32 elements after the row's 16-byte header (K a multiple
 *         of 32). Hopper (sm_90) converts E4M3 in hardware; the CPU
 *         multiplies by dequantized rows (oj_qmatmul).
 *
 * A quantized matrix (oj_qtensor) is [N, K]: N rows of K elements, a weight
 * in the layout of oj_linear's (out features, in features). Its blocks live
 * in a U8 tensor of the engine [N, row bytes], charged to the engine's
 * budget. On a CUDA engine the blocks live in device memory (quantized on
 * the host, then copied) and the backend's qgemv / qdequant entries
 * multiply and dequantize them; a backend without those entries refuses
 * quantized matrices with OJ_ERR_UNSUPPORTED naming the type. */
#ifndef OJAS_QUANT_H
#define OJAS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "ojas/core.h"
#include "ojas/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Quantized types. New members are appended at the end (ABI). */
typedef enum oj_qtype {
    OJ_Q8_0 = 0,
    OJ_Q4_0 = 1,
    OJ_Q4_1 = 2,
    OJ_Q4_K = 3,
    OJ_FP8_E4M3 = 4,
    OJ_QTYPE_COUNT
} oj_qtype;

/* Elements per block of q8_0, q4_0, q4_1 (and per sub-block of q4_k). */
#define OJ_QBLOCK 32
/* Elements per super-block of q4_k (ggml's QK_K). */
#define OJ_QK_K 256

/* "q8_0", "q4_0", "q4_1", "q4_k", "fp8"; "invalid" for anything else. */
const char *oj_qtype_name(oj_qtype t);
/* The inverse of oj_qtype_name (lower case, exact); false (t unchanged)
 * for anything else. */
bool oj_qtype_parse(const char *s, oj_qtype *t);
/* Bytes of one block: 34, 18, 20 (blocks of 32), 144 (q4_k, a super-block
 * of 256), 32 (fp8, after its row's 16-byte header); 0 for an invalid
 * type. */
size_t oj_qtype_block_bytes(oj_qtype t);
/* Elements of one block: 32, or 256 for q4_k; 0 for an invalid type. */
int64_t oj_qtype_block_elems(oj_qtype t);
/* Bytes of a row of k elements (k / elems blocks; fp8: 16 + k); 0 when k
 * is not a positive multiple of the type's block (oj_qtype_block_elems) or
 * t is invalid. */
size_t oj_qtype_row_bytes(oj_qtype t, int64_t k);

/* Quantize one row of k f32 values (k a positive multiple of the block) into
 * `out` (oj_qtype_row_bytes(t, k) bytes), rounding exactly as ggml's
 * reference quantizer of t. Values must be finite. Returns OJ_OK, or
 * OJ_ERR_INVALID_ARGUMENT (bad type, k, NULL pointer) / OJ_ERR_NUMERIC
 * (a NaN or infinity, its index named) recorded in err (may be NULL). */
oj_status oj_quantize_row(oj_qtype t, const float *x, int64_t k, void *out, oj_error *err);
/* Dequantize one row: out[j] = the value block j / 32 encodes (formulas
 * above; f16 scales widened exactly, products in f32). Same errors as
 * oj_quantize_row except OJ_ERR_NUMERIC (any bytes are accepted: an f16
 * NaN scale gives NaN values). */
oj_status oj_dequantize_row(oj_qtype t, const void *q, int64_t k, float *out, oj_error *err);

/* A quantized [N, K] matrix (opaque). */
typedef struct oj_qtensor oj_qtensor;

/* Quantize w: [N, K] f32, bf16 or f16, any strides, K a multiple of the
 * type's block, 32 or 256 (OJ_ERR_SHAPE otherwise), values finite
 * (OJ_ERR_NUMERIC naming the first bad element in row order). Each row is
 * quantized by oj_quantize_row (bf16/f16 widened to f32 first); a matrix of
 * 2^20 elements or more has its rows split over oj_engine_threads host
 * threads (the same bytes for any thread count). Returns a new oj_qtensor
 * owned by the caller (free with oj_qtensor_free, before the engine), or
 * NULL with the error recorded on w's engine (OJ_ERR_DTYPE, OJ_ERR_SHAPE,
 * OJ_ERR_UNSUPPORTED on a backend without quantized entries,
 * OJ_ERR_CAPACITY when the budget is exceeded). On a CUDA engine w is read
 * back and quantized on the host, the blocks copied to the device. */
oj_qtensor *oj_quantize(oj_tensor *w, oj_qtype t);
/* A quantized [n, k] matrix from its raw blocks (`nbytes` must equal
 * n * oj_qtype_row_bytes(t, k), else OJ_ERR_SHAPE), copied: how a reader
 * such as GGUF's brings stored blocks in. Caller owns the result. */
oj_qtensor *oj_qtensor_from_blocks(oj_engine *eng, oj_qtype t, int64_t n, int64_t k,
                                   const void *blocks, size_t nbytes);
/* Free q (its block tensor is released). NULL is a no-op. */
void oj_qtensor_free(oj_qtensor *q);
oj_qtype oj_qtensor_type(const oj_qtensor *q);
/* N (rows) and K (elements per row). */
int64_t oj_qtensor_rows(const oj_qtensor *q);
int64_t oj_qtensor_cols(const oj_qtensor *q);
/* The blocks, row-major, N * row bytes of them (read-only, host memory);
 * NULL for a matrix on a device engine (device memory). */
const void *oj_qtensor_data(const oj_qtensor *q);
size_t oj_qtensor_nbytes(const oj_qtensor *q);
oj_engine *oj_qtensor_engine(const oj_qtensor *q);

/* The f32 [N, K] matrix q encodes (oj_dequantize_row per row), owned by the
 * current scope; NULL with the error recorded on q's engine. */
oj_tensor *oj_dequantize(const oj_qtensor *q);

/* y = x @ W^T with W = the matrix q encodes: x [..., K] f32 (any strides),
 * q [N, K] -> y [..., N] f32, contiguous, owned by the current scope. Not
 * recorded by autograd (weights of inference).
 *
 * Method (ggml's): each row of x is quantized per block of 32 to int8 with
 * an f32 scale dx = amax / 127 (q8_0's rounding, scale kept in f32), each
 * block's dot product is an exact int32 sum of int8 x int8 (q8_0, q4_0) or
 * uint4 x int8 (q4_1, plus m * dx * sum(qx); q4_k per sub-block of 32 with
 * dw = d * sc, minus dmin * m * dx * sum(qx)), scaled by dw * dx and summed
 * in f32. The int8 products run on AVX2 (maddubs/madd) when the CPU has
 * AVX2, FMA and F16C, else in portable C; OJAS_QUANT_DOT=avxvnni or
 * avx512vnni selects the AVX-VNNI (dpbusd) or AVX-512 VNNI (vpdpbusd, 512
 * bits) kernels, which give the AVX2 kernels' bits.
 *
 * Accuracy: against y_ref = x @ dequantize(q)^T in f64, every element obeys
 *   |y - y_ref| <= sum over blocks b of (0.5 + 2^-15) dx_b sum_{j in b} |w_j|
 *                  + (K / 32 + 4) 2^-23 sum_k |x_k w_k|   (test_quant.c)
 * (the first term is x's rounding to int8, the second the f32 sums).
 * Order: rows of W are split into chunks independent of the thread count,
 * each output element is summed by one thread in a fixed order, so y is
 * bit-identical for any number of threads and across runs, under FAST and
 * EXACT numerics alike; AVX2, AVX-VNNI and AVX-512 VNNI give identical
 * results (same float operations in the same order), the portable kernels
 * differ from them in the last bits.
 * fp8 on the CPU: each row of W dequantized to f32 and multiplied by x in
 * f32 (element order; x not rounded to int8).
 * On CUDA (no int8 rounding of x): up to 8 rows of x by the dequantizing
 * GEMV in f32 (x @ dequantize(W)^T up to the f32 summation order, the same
 * bits on every run; fp8 under FAST numerics: s times the sum of q x, the
 * scale applied once a row), more rows as cast(x, bf16) @ dequantize(W, bf16)^T
 * by the GEMM, cast back to f32; x is not checked for NaN there.
 * Errors: OJ_ERR_DTYPE (x not f32), OJ_ERR_SHAPE (last dim of x != K),
 * OJ_ERR_UNSUPPORTED (a backend without quantized entries),
 * OJ_ERR_NUMERIC (non-finite x, CPU), OJ_ERR_INVALID_ARGUMENT (x and q of
 * different engines). */
oj_tensor *oj_qmatmul(oj_tensor *x, const oj_qtensor *q);

/* ---------------------------------------------------------------- GGUF */

/* ggml's type number of t (OJ_GGML_Q8_0, _Q4_0, _Q4_1, _Q4_K); UINT32_MAX for an
 * invalid t. */
uint32_t oj_qtype_to_ggml(oj_qtype t);
/* The inverse; false for a ggml type that is not one of ours. */
bool oj_qtype_from_ggml(uint32_t ggml_type, oj_qtype *t);

/* Tensor `name` of g, of type Q8_0, Q4_0, Q4_1 or Q4_K with dims {K} or {K, N},
 * as a quantized [N, K] matrix on eng (blocks copied), owned by the
 * caller. NULL with, recorded on eng: OJ_ERR_OUT_OF_RANGE (no such name),
 * OJ_ERR_UNSUPPORTED (another type, more than 2 dims, a backend without
 * quantized entries), OJ_ERR_CAPACITY. */
oj_qtensor *oj_gguf_qtensor(const oj_gguf *g, oj_engine *eng, const char *name);
/* Add q to a GGUF writer as tensor `name` (dims {K, N}); q's blocks are
 * borrowed until the writer writes. Errors as oj_gguf_writer_add_tensor,
 * and OJ_ERR_UNSUPPORTED for a matrix on a device engine (its blocks are
 * not in host memory). */
oj_status oj_gguf_writer_add_qtensor(oj_gguf_writer *w, const char *name, const oj_qtensor *q,
                                     oj_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_QUANT_H */
