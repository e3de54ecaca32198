// test: paged attention (oj__paged_attention) over keys and values in
// scattered blocks of a pool gives scaled_dot_product_attention's result on
// the same keys laid out in order, bit for bit on the CPU (f32: the kernel
// that reads the blocks in place; f64: the gathered fallback), for one to
// many queries, block sizes that do and do not divide the keys, GQA and a
// strided q; refusals name what was wrong. The packed form
// (oj__paged_attention_varlen: rows of many sequences, device tables) gives
// each row the single-sequence result and an inactive row zeros;
// oj__paged_kv_write_ stores rows at their slots and skips slot -1.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "ojas/ops.h"

static oj_engine *eng;

static int setup(void **state) {
    (void)state;
    oj_engine_config c = oj_engine_config_default();
    c.numerics = OJ_NUMERICS_EXACT;
    c.threads = 2;
    return oj_engine_create(&c, &eng, NULL) == OJ_OK ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    return 0;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* H query heads over Hkv kv heads of D, T queries over S keys in blocks of
 * BS (NB blocks, handed out in a scrambled order), dtype dt. */
static void check(int64_t H, int64_t Hkv, int64_t D, int64_t T, int64_t S, int64_t BS, oj_dtype dt) {
    oj_scope_begin(eng);
    const int64_t nb = (S + BS - 1) / BS, NB = nb + 3;
    int32_t *blocks = malloc((size_t)nb * sizeof *blocks);
    /* distinct, scrambled ids: a stride coprime with NB = nb + 3 */
    int64_t stride = 1;
    for (int64_t c = 2; c < NB && stride == 1; c++) {
        int64_t a = c, b = NB;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        if (a == 1) stride = c;
    }
    for (int64_t i = 0; i < nb; i++) blocks[i] = (int32_t)((i * stride + 1) % NB);
    int64_t ps[4] = {NB, Hkv, BS, D}, qs4[4] = {1, T, H, D}, cs[4] = {1, Hkv, S, D};
    uint32_t seed = (uint32_t)(H * 131 + T * 7 + S * 3 + BS);
    oj_tensor *kp = oj_zeros(eng, 4, ps, dt), *vp = oj_zeros(eng, 4, ps, dt);
    oj_tensor *kc = oj_zeros(eng, 4, cs, dt), *vc = oj_zeros(eng, 4, cs, dt);
    oj_tensor *q0 = oj_zeros(eng, 4, qs4, dt);
    const int64_t nbuf = NB * Hkv * BS * D > T * H * D ? NB * Hkv * BS * D : T * H * D;
    double *buf = malloc((size_t)nbuf * sizeof *buf);
    /* random pools, the contiguous copy of the sequence's keys */
    for (int which = 0; which < 2; which++) {
        oj_tensor *pool = which ? vp : kp, *cont = which ? vc : kc;
        for (int64_t i = 0; i < NB * Hkv * BS * D; i++)
            buf[i] = (double)(lcg(&seed) % 2001) / 1000.0 - 1.0;
        oj_tensor *tmp = oj_from_host(eng, 4, ps, OJ_F64, buf, (size_t)(NB * Hkv * BS * D) * sizeof *buf);
        oj_tensor *tc = oj_cast(tmp, dt);
        assert_int_equal(oj_copy_(pool, tc), OJ_OK);
        for (int64_t j = 0; j < S; j++) {
            oj_tensor *b = oj_narrow(pool, 0, blocks[j / BS], 1);
            oj_tensor *src = oj_narrow(b, 2, j % BS, 1);
            oj_tensor *dst = oj_narrow(cont, 2, j, 1);
            assert_int_equal(oj_copy_(dst, src), OJ_OK);
            oj_release(b), oj_release(src), oj_release(dst);
        }
        oj_release(tmp), oj_release(tc);
    }
    for (int64_t i = 0; i < T * H * D; i++) buf[i] = (double)(lcg(&seed) % 2001) / 1000.0 - 1.0;
    oj_tensor *qt = oj_from_host(eng, 4, qs4, OJ_F64, buf, (size_t)(T * H * D) * sizeof *buf);
    oj_tensor *qc = oj_cast(qt, dt);
    assert_int_equal(oj_copy_(q0, qc), OJ_OK);
    oj_tensor *q = oj_transpose(q0, 1, 2); /* [1, H, T, D], strided as a model's heads */
    oj_tensor *want = oj_scaled_dot_product_attention(q, kc, vc, NULL, true, NAN);
    oj_tensor *got = oj__paged_attention(q, kp, vp, blocks, S, NAN);
    if (got == NULL) fail_msg("paged_attention: %s", oj_last_error(eng));
    const size_t es = oj_dtype_size(dt), n = (size_t)(H * T * D);
    char *a = malloc(n * es), *b = malloc(n * es);
    oj_tensor *wc = oj_contiguous(want), *gc = oj_contiguous(got);
    assert_int_equal(oj_to_host(wc, a, n * es), OJ_OK);
    assert_int_equal(oj_to_host(gc, b, n * es), OJ_OK);
    if (memcmp(a, b, n * es) != 0)
        fail_msg("H %lld Hkv %lld T %lld S %lld BS %lld: paged != contiguous", (long long)H,
                 (long long)Hkv, (long long)T, (long long)S, (long long)BS);
    free(a);
    free(b);
    free(buf);
    free(blocks);
    oj_scope_end(eng);
}

static void test_matches_contiguous_f32(void **state) {
    (void)state;
    check(4, 2, 8, 1, 1, 4, OJ_F32);
    check(4, 2, 8, 1, 37, 4, OJ_F32);     /* one decode query */
    check(4, 4, 16, 5, 5, 16, OJ_F32);    /* a prompt in one block */
    check(4, 2, 8, 7, 150, 16, OJ_F32);   /* a chunk after a long past */
    check(6, 2, 8, 70, 70, 7, OJ_F32);    /* queries past one tile, an odd block */
    check(2, 1, 32, 33, 200, 64, OJ_F32); /* key tiles of one block each */
}

static void test_matches_contiguous_f64(void **state) {
    (void)state;
    check(4, 2, 8, 3, 41, 4, OJ_F64);
}

static void test_refusals(void **state) {
    (void)state;
    oj_scope_begin(eng);
    int64_t ps[4] = {4, 2, 4, 8}, qs[4] = {1, 4, 3, 8}, q2[4] = {2, 4, 3, 8}, q3[4] = {1, 3, 3, 8};
    oj_tensor *kp = oj_zeros(eng, 4, ps, OJ_F32), *vp = oj_zeros(eng, 4, ps, OJ_F32);
    oj_tensor *q = oj_zeros(eng, 4, qs, OJ_F32);
    int32_t ok_blocks[2] = {3, 0}, bad[2] = {3, 4};
    assert_null(oj__paged_attention(q, kp, vp, bad, 6, NAN));
    assert_int_equal(oj_last_status(eng), OJ_ERR_OUT_OF_RANGE);
    assert_non_null(strstr(oj_last_error(eng), "block 1 of the table is 4"));
    oj_clear_error(eng);
    assert_null(oj__paged_attention(q, kp, vp, ok_blocks, 2, NAN)); /* S < T */
    assert_non_null(strstr(oj_last_error(eng), "T <= S"));
    oj_clear_error(eng);
    assert_null(oj__paged_attention(oj_zeros(eng, 4, q2, OJ_F32), kp, vp, ok_blocks, 6, NAN));
    assert_non_null(strstr(oj_last_error(eng), "one sequence"));
    oj_clear_error(eng);
    assert_null(oj__paged_attention(oj_zeros(eng, 4, q3, OJ_F32), kp, vp, ok_blocks, 6, NAN));
    assert_non_null(strstr(oj_last_error(eng), "multiple of the kv heads"));
    oj_clear_error(eng);
    assert_null(oj__paged_attention(oj_zeros(eng, 4, qs, OJ_F64), kp, vp, ok_blocks, 6, NAN));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_non_null(oj__paged_attention(q, kp, vp, ok_blocks, 6, NAN));
    oj_scope_end(eng);
}

/* Packed rows of three sequences (tables [3, 4], GQA 4/2, blocks of 4):
 * each row's output is oj__paged_attention's for its sequence's keys
 * 0..pos, bit for bit; a row at pos -1 is zeros. kv_write puts rows at
 * their slots and leaves the pool alone for slot -1. Refusals. */
static void test_varlen_and_write(void **state) {
    (void)state;
    oj_scope_begin(eng);
    enum { H = 4, Hkv = 2, D = 8, BS = 4, NB = 12, N = 5 };
    int64_t ps[4] = {NB, Hkv, BS, D}, qs[4] = {1, H, N, D}, ts[2] = {3, 4}, ns[1] = {N};
    uint32_t seed = 9;
    double *h = malloc((size_t)(NB * Hkv * BS * D) * sizeof *h);
    for (int64_t i = 0; i < NB * Hkv * BS * D; i++) h[i] = (double)(lcg(&seed) % 2001) / 1000.0 - 1.0;
    oj_tensor *kp = oj_cast(oj_from_host(eng, 4, ps, OJ_F64, h, (size_t)(NB * Hkv * BS * D) * 8), OJ_F32);
    for (int64_t i = 0; i < NB * Hkv * BS * D; i++) h[i] = (double)(lcg(&seed) % 2001) / 1000.0 - 1.0;
    oj_tensor *vp = oj_cast(oj_from_host(eng, 4, ps, OJ_F64, h, (size_t)(NB * Hkv * BS * D) * 8), OJ_F32);
    oj_tensor *q = oj_cast(oj_from_host(eng, 4, qs, OJ_F64, h, (size_t)(H * N * D) * 8), OJ_F32);
    const int32_t tab[12] = {7, 2, 9, 0, /**/ 11, 4, 0, 0, /**/ 1, 3, 5, 6};
    const int32_t seq[N] = {0, 2, 1, 2, 0}, pos[N] = {9, 14, 6, -1, 0};
    oj_tensor *tt = oj_from_host(eng, 2, ts, OJ_I32, tab, sizeof tab);
    oj_tensor *st = oj_from_host(eng, 1, ns, OJ_I32, seq, sizeof seq);
    oj_tensor *pt = oj_from_host(eng, 1, ns, OJ_I32, pos, sizeof pos);
    oj_tensor *y = oj__paged_attention_varlen(q, kp, vp, tt, st, pt, NAN);
    if (y == NULL) fail_msg("varlen: %s", oj_last_error(eng));
    for (int64_t i = 0; i < N; i++) {
        float got[H * D], want[H * D];
        oj_tensor *yi = oj_contiguous(oj_narrow(y, 2, i, 1));
        assert_int_equal(oj_to_host(yi, got, sizeof got), OJ_OK);
        if (pos[i] < 0) {
            memset(want, 0, sizeof want);
        } else {
            oj_tensor *w = oj__paged_attention(oj_narrow(q, 2, i, 1), kp, vp, tab + seq[i] * 4,
                                               pos[i] + 1, NAN);
            assert_non_null(w);
            assert_int_equal(oj_to_host(oj_contiguous(w), want, sizeof want), OJ_OK);
        }
        assert_memory_equal(got, want, sizeof want);
    }
    /* kv_write: rows 0..4 of x [1, Hkv, N, D] to slots 5, 46, -1, 0, 33 */
    int64_t xs[4] = {1, Hkv, N, D};
    oj_tensor *x = oj_cast(oj_from_host(eng, 4, xs, OJ_F64, h + 17, (size_t)(Hkv * N * D) * 8), OJ_F32);
    const int32_t slot[N] = {5, 46, -1, 0, 33};
    oj_tensor *sl = oj_from_host(eng, 1, ns, OJ_I32, slot, sizeof slot);
    float *before = malloc((size_t)(NB * Hkv * BS * D) * sizeof *before);
    float *after = malloc((size_t)(NB * Hkv * BS * D) * sizeof *after);
    float xr[Hkv * N * D];
    assert_int_equal(oj_to_host(kp, before, (size_t)(NB * Hkv * BS * D) * 4), OJ_OK);
    assert_int_equal(oj_to_host(x, xr, sizeof xr), OJ_OK);
    assert_int_equal(oj__paged_kv_write_(kp, x, sl), OJ_OK);
    assert_int_equal(oj_to_host(kp, after, (size_t)(NB * Hkv * BS * D) * 4), OJ_OK);
    for (int64_t t = 0; t < N; t++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            if (slot[t] >= 0) {
                float *dst = after + ((slot[t] / BS * Hkv + hk) * BS + slot[t] % BS) * D;
                assert_memory_equal(dst, xr + (hk * N + t) * D, D * sizeof(float));
                memcpy(dst, before + (dst - after), D * sizeof(float)); /* for the check below */
            }
    assert_memory_equal(after, before, (size_t)(NB * Hkv * BS * D) * sizeof *after); /* nothing else */
    /* refusals */
    oj_tensor *t64 = oj_cast(tt, OJ_I64);
    assert_null(oj__paged_attention_varlen(q, kp, vp, t64, st, pt, NAN));
    assert_non_null(strstr(oj_last_error(eng), "must be i32"));
    oj_clear_error(eng);
    assert_null(oj__paged_attention_varlen(q, kp, vp, tt, oj_narrow(st, 0, 0, 4), pt, NAN));
    assert_non_null(strstr(oj_last_error(eng), "seq and pos [N]"));
    oj_clear_error(eng);
    assert_int_equal(oj__paged_kv_write_(kp, oj_cast(x, OJ_F64), sl), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_int_equal(oj__paged_kv_write_(kp, x, oj_narrow(sl, 0, 0, 2)), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "slot i32 [N]"));
    oj_clear_error(eng);
    free(before);
    free(after);
    free(h);
    oj_scope_end(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_contiguous_f32),
        cmocka_unit_test(test_matches_contiguous_f64),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_varlen_and_write),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
