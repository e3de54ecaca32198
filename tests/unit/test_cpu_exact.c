// test: OJ_NUMERICS_EXACT is bit-identical across thread counts and runs —
// a nanolab-tiny GPT trained for 50 steps (20 under ASan) (Muon for the hidden matrices,
// AdamW for the rest, gradient clipping, as `ojas train` does) gives the
// same losses, gradients and parameters (hashed bytes) with threads = 1, 2,
// 3 and 7 (the parallel runs with every parallel-for forced to split small
// tensors) and on a second run. Also a 2-layer MLP with an attention block,
// trained 20 steps with AdamW, on every SIMD level this CPU has (each
// level against itself, threads 1, 3 and 7).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <time.h>

#include "backend/cpu/cpu_pool.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

/* Under AddressSanitizer (an -O0 build, several times slower) the GPT
 * trains for fewer steps so the test stays within ~20 s. */
#if defined(__SANITIZE_ADDRESS__)
#define STEPS 20
#else
#define STEPS 50 /* GPT */
#endif
#define BLOCK_STEPS 20 /* MLP + attention */

typedef struct {
    uint64_t loss, grad, param; /* FNV-1a of the bytes */
    double first_loss, last_loss;
} run_hash;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_tensor(uint64_t h, oj_tensor *t) {
    if (t == NULL) return fnv(h, "none", 4);
    size_t n = (size_t)oj_numel(t) * oj_dtype_size(oj_tensor_dtype(t));
    void *buf = malloc(n ? n : 1);
    assert_int_equal(oj_to_host(t, buf, n), OJ_OK);
    h = fnv(h, buf, n);
    free(buf);
    return h;
}

static oj_engine *engine(int threads, int shift, oj_cpu_isa isa) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = threads;
    cfg.numerics = OJ_NUMERICS_EXACT;
    cfg.seed = 42;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    oj__cpu_set_grain_shift(eng, shift);
    assert_int_equal(oj__cpu_set_isa(eng, isa), isa);
    return eng;
}

static oj_tensor *tokens(oj_engine *eng, int64_t B, int64_t T, int64_t V, uint32_t s) {
    int64_t *v = malloc((size_t)(B * T) * sizeof *v);
    for (int64_t i = 0; i < B * T; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (int64_t)((s >> 8) % (uint32_t)V);
    }
    int64_t shape[2] = {B, T};
    oj_tensor *t = oj_from_host(eng, 2, shape, OJ_I64, v, (size_t)(B * T) * sizeof *v);
    free(v);
    return t;
}

/* ---------------------------------------------------------------- GPT */

static run_hash train_gpt(int threads, int shift) {
    double t0 = now_s();
    oj_engine *eng = engine(threads, shift, oj_cpu_isa_detect());
    oj_gpt_config cfg;
    assert_true(oj_gpt_preset("nanolab-tiny", &cfg));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &cfg, 7, &m), OJ_OK);
    oj_optim *o = oj_optim_create(eng);
    oj_named_tensors sd = oj_gpt_state_dict(m);
    oj_optim_hparams mu = oj_muon_hparams(0.02), aw = oj_adamw_hparams(3e-3, 0.01);
    assert_true(oj_optim_add_muon_split(o, &sd, &mu, &aw, NULL, NULL) >= 0);
    run_hash r = {14695981039346656037ull, 14695981039346656037ull, 14695981039346656037ull, 0,
                  0};
    const int64_t B = 2, T = 32;
    for (int step = 0; step < STEPS; step++) {
        oj_scope_begin(eng);
        /* two fixed batches in turn: the loss must fall */
        oj_tensor *x = tokens(eng, B, T, cfg.vocab_size, 100u + (uint32_t)(step % 2));
        oj_tensor *y = tokens(eng, B, T, cfg.vocab_size, 900u + (uint32_t)(step % 2));
        oj_tensor *loss = oj_gpt_loss(m, x, y);
        if (loss == NULL) fail_msg("loss: %s", oj_last_error(eng));
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        float lv = (float)oj_item(loss);
        r.loss = fnv(r.loss, &lv, sizeof lv);
        if (step == 0) r.first_loss = lv;
        r.last_loss = lv;
        for (int64_t i = 0; i < sd.n; i++) r.grad = hash_tensor(r.grad, oj_grad(sd.tensors[i]));
        double norm = oj_optim_clip_grad_norm(o, 1.0);
        r.loss = fnv(r.loss, &norm, sizeof norm);
        assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
        oj_optim_zero_grad(o);
        oj_scope_end(eng);
    }
    for (int64_t i = 0; i < sd.n; i++) r.param = hash_tensor(r.param, sd.tensors[i]);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_optim_free(o);
    oj_gpt_free(m);
    oj_engine_free(eng);
    print_message("gpt run, %d threads, grain shift %d: %.2f s\n", threads, shift, now_s() - t0);
    return r;
}

static void expect_same(const char *what, const run_hash *a, const run_hash *b) {
    if (a->loss != b->loss || a->grad != b->grad || a->param != b->param)
        fail_msg("%s: hashes differ (loss %016llx/%016llx, grad %016llx/%016llx, param "
                 "%016llx/%016llx; last loss %.9g/%.9g)",
                 what, (unsigned long long)a->loss, (unsigned long long)b->loss,
                 (unsigned long long)a->grad, (unsigned long long)b->grad,
                 (unsigned long long)a->param, (unsigned long long)b->param, a->last_loss,
                 b->last_loss);
}

static void test_gpt_threads_and_runs(void **state) {
    (void)state;
    run_hash ref = train_gpt(1, 0);
    print_message("gpt: loss %.4f -> %.4f over %d steps, hashes %016llx %016llx %016llx\n",
                  ref.first_loss, ref.last_loss, STEPS, (unsigned long long)ref.loss,
                  (unsigned long long)ref.grad, (unsigned long long)ref.param);
    assert_true(ref.last_loss < ref.first_loss); /* it trains */
    const int threads[] = {2, 3, 7};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        run_hash r = train_gpt(threads[i], 8); /* every kernel split into small chunks */
        char what[64];
        snprintf(what, sizeof what, "%d threads, split", threads[i]);
        expect_same(what, &ref, &r);
    }
    run_hash again = train_gpt(2, 0);
    expect_same("second run, 2 threads", &ref, &again);
}

/* ---------------------------------------------------------------- MLP + attention */

static run_hash train_block(int threads, int shift, oj_cpu_isa isa) {
    double t0 = now_s();
    oj_engine *eng = engine(threads, shift, isa);
    const int64_t B = 2, T = 40, C = 32, H = 4, F = 96;
    int64_t s_in[3] = {B, T, C}, s_w1[2] = {F, C}, s_w2[2] = {C, F}, s_qkv[2] = {3 * C, C},
            s_f[1] = {F}, s_c[1] = {C};
    oj_tensor *p[7] = {
        oj_rand_normal(eng, 2, s_qkv, OJ_F32, 0, 0.1), oj_rand_normal(eng, 2, s_w1, OJ_F32, 0, 0.1),
        oj_zeros(eng, 1, s_f, OJ_F32),                 oj_rand_normal(eng, 2, s_w2, OJ_F32, 0, 0.1),
        oj_zeros(eng, 1, s_c, OJ_F32),                 oj_ones(eng, 1, s_c, OJ_F32),
        oj_zeros(eng, 1, s_c, OJ_F32)};
    const char *names[7] = {"qkv", "w1", "b1", "w2", "b2", "ln.w", "ln.b"};
    for (int i = 0; i < 7; i++) oj_set_requires_grad(p[i], true);
    oj_named_tensors nt = {7, names, p};
    oj_optim *o = oj_optim_create(eng);
    oj_optim_hparams aw = oj_adamw_hparams(1e-2, 0.01);
    assert_true(oj_optim_add_group(o, &aw, &nt) >= 0);
    oj_tensor *x = oj_rand_normal(eng, 3, s_in, OJ_F32, 0, 1);
    oj_tensor *target = oj_rand_normal(eng, 3, s_in, OJ_F32, 0, 1);
    run_hash r = {14695981039346656037ull, 14695981039346656037ull, 14695981039346656037ull, 0,
                  0};
    for (int step = 0; step < BLOCK_STEPS; step++) {
        oj_scope_begin(eng);
        // x (B,T,C) -> ln -> qkv -> causal attention (H heads) -> + x -> MLP (gelu) -> + h
        oj_tensor *h = oj_layer_norm(x, p[5], p[6], 1e-5);
        int64_t s5[5] = {B, T, 3, H, C / H}, s3[3] = {B, T, C};
        oj_tensor *qkv = oj_view(oj_linear(h, p[0], NULL), 5, s5);
        oj_tensor *q = oj_transpose(oj_select(qkv, 2, 0), 1, 2);
        oj_tensor *k = oj_transpose(oj_select(qkv, 2, 1), 1, 2);
        oj_tensor *v = oj_transpose(oj_select(qkv, 2, 2), 1, 2);
        oj_tensor *a = oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN);
        h = oj_add(x, oj_reshape(oj_transpose(a, 1, 2), 3, s3));
        oj_tensor *y = oj_add(h, oj_linear(oj_gelu_tanh(oj_linear(h, p[1], p[2])), p[3], p[4]));
        oj_tensor *d = oj_sub(oj_softmax(y, -1), oj_sigmoid(target));
        oj_tensor *loss = oj_mean_all(oj_mul(d, d));
        if (loss == NULL) fail_msg("block: %s", oj_last_error(eng));
        assert_int_equal(oj_backward(loss, false), OJ_OK);
        float lv = (float)oj_item(loss);
        r.loss = fnv(r.loss, &lv, sizeof lv);
        if (step == 0) r.first_loss = lv;
        r.last_loss = lv;
        for (int i = 0; i < 7; i++) r.grad = hash_tensor(r.grad, oj_grad(p[i]));
        assert_int_equal(oj_optim_step(o, NULL), OJ_OK);
        oj_optim_zero_grad(o);
        oj_scope_end(eng);
    }
    for (int i = 0; i < 7; i++) r.param = hash_tensor(r.param, p[i]);
    assert_int_equal(oj_last_status(eng), OJ_OK);
    oj_optim_free(o);
    for (int i = 0; i < 7; i++) oj_release(p[i]);
    oj_release(x);
    oj_release(target);
    oj_engine_free(eng);
    print_message("block run, %s, %d threads, grain shift %d: %.2f s\n", oj_cpu_isa_name(isa),
                  threads, shift, now_s() - t0);
    return r;
}

static void test_block_every_level(void **state) {
    (void)state;
    oj_cpu_isa best = oj_cpu_isa_detect();
    for (int l = OJ_ISA_SCALAR; l <= (int)best; l++) {
        run_hash ref = train_block(1, 0, (oj_cpu_isa)l);
        assert_true(ref.last_loss < ref.first_loss);
        const int threads[] = {3, 7};
        for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
            run_hash r = train_block(threads[i], 8, (oj_cpu_isa)l);
            char what[96];
            snprintf(what, sizeof what, "block on %s, %d threads", oj_cpu_isa_name((oj_cpu_isa)l),
                     threads[i]);
            expect_same(what, &ref, &r);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_threads_and_runs),
        cmocka_unit_test(test_block_every_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
