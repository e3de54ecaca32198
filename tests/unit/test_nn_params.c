// test: parameter registry — order-independent seeded init (values depend on
// (seed, name) only, as documented), init distributions and fans, errors,
// lookup/count/numel/freeze/buffers, state_dict save/load round trip, strict
// refusal that changes nothing, and use with an optimizer.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmocka.h>

#include "ojas/autograd.h"
#include "ojas/nn.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

static oj_engine *eng_new(void) {
    oj_engine *eng = NULL;
    oj_engine_config cfg = oj_engine_config_default();
    cfg.threads = 1;
    assert_int_equal(oj_engine_create(&cfg, &eng, NULL), OJ_OK);
    return eng;
}

static void values(oj_tensor *t, double *out) {
    for (int64_t i = 0; i < oj_numel(t); i++) out[i] = oj_item_at(t, i);
}

static void test_init_order_independent(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    int64_t s[2] = {8, 5}, s1[1] = {7};
    oj_init n02 = oj_init_normal(0.0, 0.02), xu = oj_init_xavier_uniform(1.0);
    oj_params *a = oj_params_create(eng, 1234);
    oj_params *b = oj_params_create(eng, 1234);
    oj_params *c = oj_params_create(eng, 99);
    oj_tensor *a1 = oj_params_add(a, "h.0.attn.weight", 2, s, OJ_F32, &n02);
    oj_tensor *a2 = oj_params_add(a, "h.1.attn.weight", 2, s, OJ_F32, &xu);
    // b: another order, something in between, and an RNG draw on the engine
    oj_tensor *b0 = oj_params_add(b, "extra", 1, s1, OJ_F32, &n02);
    oj_release(oj_rand_normal(eng, 1, s1, OJ_F32, 0, 1));
    oj_tensor *b2 = oj_params_add(b, "h.1.attn.weight", 2, s, OJ_F32, &xu);
    oj_tensor *b1 = oj_params_add(b, "h.0.attn.weight", 2, s, OJ_F32, &n02);
    oj_tensor *c1 = oj_params_add(c, "h.0.attn.weight", 2, s, OJ_F32, &n02);
    assert_non_null(b0);
    double va[40], vb[40], vc[40];
    values(a1, va);
    values(b1, vb);
    assert_memory_equal(va, vb, sizeof va);
    values(a2, va);
    values(b2, vb);
    assert_memory_equal(va, vb, sizeof va);
    values(a1, va);
    values(c1, vc);
    assert_true(memcmp(va, vc, sizeof va) != 0); // another seed
    values(a2, vb);
    assert_true(memcmp(va, vb, sizeof va) != 0); // another name
    // f64 values rounded give the f32 ones (computed in double, then rounded)
    oj_params *d = oj_params_create(eng, 1234);
    oj_tensor *d1 = oj_params_add(d, "h.0.attn.weight", 2, s, OJ_F64, &n02);
    values(a1, va);
    values(d1, vb);
    for (int i = 0; i < 40; i++) assert_true((float)vb[i] == (float)va[i]);
    // the documented stream: element i reads Philox block i/2 of
    // key = seed, counter words 2-3 = XXH64(name); Box-Muller on two 53-bit uniforms
    uint64_t h = XXH64("h.0.attn.weight", strlen("h.0.attn.weight"), 0);
    uint32_t ctr[4] = {0, 0, (uint32_t)h, (uint32_t)(h >> 32)}, key[2] = {1234, 0}, w[4];
    oj_philox4x32_10(ctr, key, w);
    double u1 = ((double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) + 1.0) * 0x1p-53;
    double u2 = (double)(((uint64_t)w[2] << 21) ^ (w[3] >> 11)) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    assert_float_equal(vb[0], 0.02 * r * cos(th), 1e-15);
    assert_float_equal(vb[1], 0.02 * r * sin(th), 1e-15);
    oj_params_free(a);
    oj_params_free(b);
    oj_params_free(c);
    oj_params_free(d);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void moments(oj_tensor *t, double *mean, double *std, double *amax, double *mn, double *mx) {
    int64_t n = oj_numel(t);
    double s = 0, s2 = 0, a = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = oj_item_at(t, i);
        s += v;
        s2 += v * v;
        a = fmax(a, fabs(v));
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    *amax = a;
    *mn = lo;
    *mx = hi;
}

static void test_init_distributions(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 7);
    int64_t s[2] = {64, 128}; // fan_in 128, fan_out 64
    double mean, sd, amax, lo, hi;
    oj_init in;

    in = oj_init_normal(0.5, 0.02);
    moments(oj_params_add(p, "normal", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_float_equal(mean, 0.5, 0.002);
    assert_float_equal(sd, 0.02, 0.001);

    in = oj_init_uniform(-0.3, 0.1);
    moments(oj_params_add(p, "uniform", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(lo >= -0.3 && hi < 0.1);
    assert_float_equal(mean, -0.1, 0.01);
    assert_float_equal(sd, 0.4 / sqrt(12.0), 0.005);

    double xb = sqrt(6.0 / (128 + 64));
    in = oj_init_xavier_uniform(1.0);
    moments(oj_params_add(p, "xu", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(amax <= xb);
    assert_true(amax > 0.95 * xb);
    in = oj_init_xavier_normal(2.0);
    moments(oj_params_add(p, "xn", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_float_equal(sd, 2.0 * sqrt(2.0 / 192), 0.01);

    // nn.Linear's default: kaiming_uniform(a = sqrt(5)) has bound 1 / sqrt(fan_in)
    in = oj_init_kaiming_uniform(oj_init_leaky_relu_gain(sqrt(5.0)), OJ_FAN_IN);
    moments(oj_params_add(p, "ku", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(amax <= 1.0 / sqrt(128.0));
    assert_true(amax > 0.95 / sqrt(128.0));
    in = oj_init_kaiming_normal(oj_init_leaky_relu_gain(0.0), OJ_FAN_OUT);
    moments(oj_params_add(p, "kn", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_float_equal(sd, sqrt(2.0) / sqrt(64.0), 0.01);
    // conv weights: fans include the receptive field
    int64_t cs[4] = {16, 8, 3, 3};
    in = oj_init_kaiming_uniform(1.0, OJ_FAN_IN);
    moments(oj_params_add(p, "conv", 4, cs, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(amax <= sqrt(3.0 / 72));
    assert_true(amax > 0.95 * sqrt(3.0 / 72));

    // truncated normal: inside the bounds, the truncated std
    in = oj_init_trunc_normal(0.0, 1.0, -2.0, 2.0);
    moments(oj_params_add(p, "tn", 2, s, OJ_F64, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(lo >= -2.0 && hi <= 2.0);
    assert_true(amax > 1.9);
    assert_float_equal(mean, 0.0, 0.03);
    assert_float_equal(sd, 0.8796, 0.02);          // std of N(0,1) truncated to [-2, 2]
    in = oj_init_trunc_normal(1.0, 0.5, 0.9, 1.1); // narrow window near the mean
    moments(oj_params_add(p, "tn2", 2, s, OJ_F32, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(lo >= 0.9f && hi <= 1.1f);
    assert_float_equal(mean, 1.0, 0.01);

    // constants
    in = oj_init_ones();
    moments(oj_params_add(p, "ones", 1, s, OJ_BF16, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(lo == 1.0 && hi == 1.0);
    in = oj_init_constant(-2.5);
    moments(oj_params_add(p, "c", 1, s, OJ_F16, &in), &mean, &sd, &amax, &lo, &hi);
    assert_true(lo == -2.5 && hi == -2.5);
    in = oj_init_zeros();
    oj_tensor *cnt = oj_params_add_buffer(p, "count", 0, NULL, OJ_I64, &in);
    assert_non_null(cnt);
    assert_false(oj_requires_grad(cnt));

    // errors name the parameter and change nothing
    int64_t before = oj_params_count(p);
    in = oj_init_xavier_uniform(1.0);
    assert_null(oj_params_add(p, "bias", 1, s, OJ_F32, &in));
    assert_int_equal(oj_last_status(eng), OJ_ERR_SHAPE);
    assert_non_null(strstr(oj_last_error(eng), "bias"));
    oj_clear_error(eng);
    in = oj_init_normal(0, 1);
    assert_null(oj_params_add(p, "normal", 1, s, OJ_F32, &in));
    assert_non_null(strstr(oj_last_error(eng), "already registered"));
    oj_clear_error(eng);
    assert_null(oj_params_add(p, "ints", 1, s, OJ_I32, &in));
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    assert_null(oj_params_add_buffer(p, "ints", 1, s, OJ_I32, &in)); // random needs float
    assert_int_equal(oj_last_status(eng), OJ_ERR_DTYPE);
    oj_clear_error(eng);
    in = oj_init_uniform(1, 1);
    assert_null(oj_params_add(p, "u", 1, s, OJ_F32, &in));
    assert_int_equal(oj_last_status(eng), OJ_ERR_INVALID_ARGUMENT);
    oj_clear_error(eng);
    in = oj_init_normal(0, -1);
    assert_null(oj_params_add(p, "n", 1, s, OJ_F32, &in));
    oj_clear_error(eng);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    in = oj_init_zeros();
    assert_null(oj_params_add(p, longname, 1, s, OJ_F32, &in));
    assert_null(oj_params_add(p, "", 1, s, OJ_F32, &in));
    oj_clear_error(eng);
    assert_int_equal(oj_params_count(p), before);
    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static void test_registry_basics(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    oj_params *p = oj_params_create(eng, 0);
    char buf[OJ_PARAM_NAME_MAX];
    assert_string_equal(oj_param_name(buf, sizeof buf, "transformer.h.0", "attn.c_attn.weight"),
                        "transformer.h.0.attn.c_attn.weight");
    assert_string_equal(oj_param_name(buf, sizeof buf, "", "wte.weight"), "wte.weight");
    assert_string_equal(oj_param_name(buf, sizeof buf, NULL, "wte.weight"), "wte.weight");
    assert_null(oj_param_name(buf, 8, "long.prefix", "leaf"));

    int64_t s2[2] = {3, 4}, s1[1] = {4};
    oj_init z = oj_init_zeros(), o = oj_init_ones();
    assert_non_null(oj_params_add(p, "h.0.w", 2, s2, OJ_F32, &z));
    assert_non_null(oj_params_add(p, "h.0.b", 1, s1, OJ_F32, &z));
    assert_non_null(oj_params_add(p, "h.01.w", 2, s2, OJ_F32, &o));
    assert_non_null(oj_params_add(p, "h.1.w", 2, s2, OJ_F32, &o));
    assert_non_null(oj_params_add_buffer(p, "h.0.running_mean", 1, s1, OJ_F32, &z));
    assert_int_equal(oj_params_count(p), 5);
    assert_string_equal(oj_params_name(p, 2), "h.01.w");
    assert_null(oj_params_name(p, 5));
    assert_int_equal(oj_params_find(p, "h.1.w"), 3);
    assert_int_equal(oj_params_find(p, "nope"), -1);
    assert_null(oj_params_get(p, "nope"));
    assert_int_equal(oj_last_status(eng), OJ_OK);
    assert_ptr_equal(oj_params_get(p, "h.1.w"), oj_params_tensor(p, 3));
    assert_true(oj_params_is_buffer(p, 4));
    assert_false(oj_params_is_buffer(p, 0));
    assert_int_equal(oj_params_numel(p, false), 12 + 4 + 12 + 12);
    assert_true(oj_requires_grad(oj_params_get(p, "h.0.w")));

    // freeze by prefix: "h.0" is h.0.w and h.0.b, not h.01.w; buffers never
    assert_int_equal(oj_params_freeze(p, "h.0", true), 2);
    assert_false(oj_requires_grad(oj_params_get(p, "h.0.w")));
    assert_true(oj_requires_grad(oj_params_get(p, "h.01.w")));
    assert_int_equal(oj_params_numel(p, true), 24);
    assert_int_equal(oj_params_freeze(p, "h.0.w", false), 1);
    assert_int_equal(oj_params_numel(p, true), 36);
    assert_int_equal(oj_params_freeze(p, NULL, false), 4);
    assert_false(oj_requires_grad(oj_params_get(p, "h.0.running_mean")));

    // freezing drops the grad
    oj_tensor *w = oj_params_get(p, "h.1.w");
    oj_scope_begin(eng);
    assert_int_equal(oj_backward(oj_sum_all(oj_mul(w, w)), false), OJ_OK);
    oj_scope_end(eng);
    assert_non_null(oj_grad(w));
    oj_params_zero_grad(p);
    assert_null(oj_grad(w));

    // adopt
    oj_tensor *ext = oj_ones(eng, 1, s1, OJ_F32);
    oj_set_requires_grad(ext, true);
    assert_ptr_equal(oj_params_adopt(p, "ext.weight", ext, false), ext);
    oj_release(ext); // the registry holds its own reference
    assert_float_equal(oj_item_at(oj_params_get(p, "ext.weight"), 0), 1.0, 0);
    assert_null(oj_params_adopt(p, "ext.weight", oj_params_get(p, "h.1.w"), false));
    oj_clear_error(eng);

    // train / eval
    assert_true(oj_params_training(p));
    oj_params_set_training(p, false);
    assert_false(oj_params_training(p));

    // state_dict view in registration order
    oj_named_tensors sd = oj_params_state_dict(p);
    assert_int_equal(sd.n, 6);
    assert_string_equal(sd.names[0], "h.0.w");
    assert_string_equal(sd.names[5], "ext.weight");

    // the optimizer takes what requires grad
    oj_params_freeze(p, "h.1", true);
    oj_optim *opt = oj_optim_create(eng);
    oj_optim_hparams hp = oj_adamw_hparams(1e-3, 0.0);
    assert_int_equal(oj_optim_add_group(opt, &hp, &sd), 0);
    assert_int_equal(oj_optim_group_size(opt, 0), 4); // h.0.w, h.0.b, h.01.w, ext.weight
    oj_optim_free(opt);

    oj_params_free(p);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

static oj_params *model(oj_engine *eng, uint64_t seed, int64_t width, oj_dtype dt) {
    oj_params *p = oj_params_create(eng, seed);
    int64_t w[2] = {width, 3}, b[1] = {width};
    oj_init n = oj_init_normal(0, 1), z = oj_init_zeros();
    assert_non_null(oj_params_add(p, "l1.weight", 2, w, dt, &n));
    assert_non_null(oj_params_add(p, "l1.bias", 1, b, dt, &n));
    assert_non_null(oj_params_add_buffer(p, "bn.running_var", 1, b, dt, &n));
    (void)z;
    return p;
}

static void snapshot(oj_params *p, double *out) {
    for (int64_t i = 0; i < oj_params_count(p); i++) {
        values(oj_params_tensor(p, i), out);
        out += oj_numel(oj_params_tensor(p, i));
    }
}

static void test_state_dict_save_load(void **state) {
    (void)state;
    oj_engine *eng = eng_new();
    char dir[] = "/tmp/ojas_params_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], other[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(other, sizeof other, "%s/other.safetensors", dir);

    oj_params *a = model(eng, 1, 4, OJ_F32);
    oj_error err = {0};
    const char *meta[] = {"format", "pt", NULL};
    assert_int_equal(oj_params_save(a, path, meta, &err), OJ_OK);

    // round trip into a registry with another seed
    oj_params *b = model(eng, 2, 4, OJ_F32);
    double va[64], vb[64];
    snapshot(a, va);
    snapshot(b, vb);
    assert_true(memcmp(va, vb, 20 * sizeof(double)) != 0);
    uint64_t v0 = oj_version(oj_params_tensor(b, 0));
    assert_int_equal(oj_params_load(b, path, true, &err), OJ_OK);
    snapshot(b, vb);
    assert_memory_equal(va, vb, 20 * sizeof(double));
    assert_true(oj_version(oj_params_tensor(b, 0)) > v0);
    assert_true(oj_requires_grad(oj_params_tensor(b, 0))); // still a trainable leaf

    // f64 registry loads the f32 file (float dtypes convert)
    oj_params *c = model(eng, 3, 4, OJ_F64);
    assert_int_equal(oj_params_load(c, path, true, &err), OJ_OK);
    snapshot(c, vb);
    assert_memory_equal(va, vb, 20 * sizeof(double));

    // strict refusal: another shape; nothing changes
    oj_params *d = model(eng, 4, 5, OJ_F32);
    double before[64], after[64];
    snapshot(d, before);
    err = (oj_error){0};
    assert_int_equal(oj_params_load(d, path, true, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "l1.weight"));
    snapshot(d, after);
    assert_memory_equal(before, after, 25 * sizeof(double));
    err = (oj_error){0};
    assert_int_equal(oj_params_load(d, path, false, &err), OJ_ERR_SHAPE); // shapes strict always

    // missing / unexpected names: refused when strict, ignored otherwise
    oj_params *e = oj_params_create(eng, 5);
    int64_t w[2] = {4, 3}, s1[1] = {9};
    oj_init n = oj_init_normal(0, 1);
    oj_params_add(e, "l1.weight", 2, w, OJ_F32, &n);
    oj_params_add(e, "l2.weight", 1, s1, OJ_F32, &n);
    double ebefore[32], eafter[32];
    snapshot(e, ebefore);
    err = (oj_error){0};
    assert_int_equal(oj_params_load(e, path, true, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "missing tensor 'l2.weight'"));
    snapshot(e, eafter);
    assert_memory_equal(ebefore, eafter, 21 * sizeof(double));
    assert_int_equal(oj_params_load(e, path, false, &err), OJ_OK);
    snapshot(e, eafter);
    assert_memory_equal(va, eafter, 12 * sizeof(double));               // l1.weight loaded
    assert_memory_equal(ebefore + 12, eafter + 12, 9 * sizeof(double)); // l2 untouched
    assert_int_equal(oj_params_save(e, other, NULL, NULL), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_params_load(b, other, true, &err), OJ_ERR_SHAPE);
    assert_non_null(strstr(err.message, "l1.bias")); // b's l1.bias is missing from the file
    // an integer tensor where a float one is expected
    int64_t iv[4] = {1, 2, 3, 4}, is[1] = {4};
    oj_safetensors_entry ent = {"l1.bias", OJ_I64, 1, is, iv};
    assert_int_equal(oj_safetensors_write(other, 1, &ent, NULL, NULL), OJ_OK);
    err = (oj_error){0};
    assert_int_equal(oj_params_load(b, other, false, &err), OJ_ERR_DTYPE);
    // a file that is not there
    assert_int_equal(oj_params_load(b, "/nonexistent/x.safetensors", true, NULL), OJ_ERR_IO);

    oj_params_free(a);
    oj_params_free(b);
    oj_params_free(c);
    oj_params_free(d);
    oj_params_free(e);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_order_independent),
        cmocka_unit_test(test_init_distributions),
        cmocka_unit_test(test_registry_basics),
        cmocka_unit_test(test_state_dict_save_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
