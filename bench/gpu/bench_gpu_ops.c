/* GPU per-op benchmark: every op of one nanolab-124m / gpt2-124m training
 * step at B x T (default 16 x 1024; C 768, H 12, D 64, V 50304, MLP 3072 /
 * SwiGLU 2048), forward and backward timed separately on a CUDA engine
 * (FAST numerics, f32 with TF32 GEMMs), the device synchronised around each
 * run through the backend's synchronize entry; median of `reps` runs after
 * one warm-up. Backward runs oj_backward_seeded on a fresh graph of the one
 * op (so it includes writing the leaves' gradients).
 *
 * Prints one table per preset sorted by time x count per step, with the
 * FLOPs and bytes we count for each op, the achieved TFLOP/s and GB/s, and
 * the fraction of the H200's limit that applies (GEMM-like ops: TF32_TFLOPS,
 * default 495 dense TF32; others: HBM_GBS, default 4100 GB/s copy), and the
 * sum over the step (ops x their count per step), to set beside the measured
 * step time of bench_gpu_train.
 *
 * usage: bench_gpu_ops [all|gpt2|nanolab] [B] [T] [reps]   (77: no GPU) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/internal.h"
#include "bench_gpu_common.h"
#include "ojas/ojas.h"

static oj_engine *E;
static int REPS = 5;
static double TF_LIMIT = 495.0, BW_LIMIT = 4100.0;

static void sync_dev(void) {
    if (E->backend->synchronize) E->backend->synchronize(E);
}

/* ---------------------------------------------------------------- results */
typedef struct {
    char name[72];
    double ms, flops, bytes;
    int count; /* times per training step */
} row;
#define MAXROWS 128
static row rows[MAXROWS];
static int nrows;

static void add_row(const char *name, const char *dir, double ms, double flops, double bytes,
                    int count) {
    if (nrows == MAXROWS || ms < 0) return;
    row *r = &rows[nrows++];
    snprintf(r->name, sizeof r->name, "%s %s", name, dir);
    r->ms = ms;
    r->flops = flops;
    r->bytes = bytes;
    r->count = count;
}

static int cmp_row(const void *a, const void *b) {
    const row *x = a, *y = b;
    double tx = x->ms * x->count, ty = y->ms * y->count;
    return (tx < ty) - (tx > ty);
}

static void print_table(const char *preset, double B, double T) {
    qsort(rows, (size_t)nrows, sizeof rows[0], cmp_row);
    double total = 0;
    for (int i = 0; i < nrows; i++) total += rows[i].ms * rows[i].count;
    printf("\n== %s B=%.0f T=%.0f: per-op times (median of %d), sorted by time x count per step\n",
           preset, B, T, REPS);
    printf("%-46s %9s %5s %9s %9s %9s %9s %9s %7s %6s\n", "op", "ms", "x", "ms/step", "GFLOP",
           "MB", "TFLOP/s", "GB/s", "%limit", "%step");
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        double s = r->ms * 1e-3;
        double tf = r->flops / s * 1e-12, gb = r->bytes / s * 1e-9;
        /* an op with more than 50 FLOPs per byte is held to the GEMM limit */
        bool gemm = r->flops > 50.0 * r->bytes;
        double lim = gemm ? tf / TF_LIMIT : gb / BW_LIMIT;
        printf("%-46s %9.3f %5d %9.3f %9.2f %9.1f %9.2f %9.1f %6.1f%% %5.1f%%\n", r->name, r->ms,
               r->count, r->ms * r->count, r->flops * 1e-9, r->bytes * 1e-6, tf, gb, 100 * lim,
               total > 0 ? 100 * r->ms * r->count / total : 0);
    }
    printf("%-46s %9s %5s %9.3f   (sum of ops x count; compare bench_gpu_train's step_ms)\n",
           "total", "", "", total);
    fflush(stdout);
    nrows = 0;
}

/* ---------------------------------------------------------------- timing
 * An op case: make(in, ctx) builds the output from the inputs. */
typedef oj_tensor *(*op_fn)(oj_tensor *const *in, void *ctx);

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

/* Forward (grad off) and backward (seeded with a random grad) times in ms;
 * -1 where not measured or failed. */
static void time_op(op_fn f, oj_tensor *const *in, int n_in, void *ctx, bool backward,
                    double *fwd, double *bwd) {
    double v[64];
    int reps = REPS < 64 ? REPS : 63;
    *fwd = *bwd = -1;
    bool prev = oj_set_grad_enabled(E, false);
    for (int r = 0; r <= reps; r++) {
        oj_scope_begin(E);
        sync_dev();
        double t0 = now_ms();
        oj_tensor *o = f(in, ctx);
        sync_dev();
        double t1 = now_ms();
        oj_scope_end(E);
        if (o == NULL) {
            fprintf(stderr, "op failed: %s\n", oj_last_error(E));
            oj_clear_error(E);
            oj_set_grad_enabled(E, prev);
            return;
        }
        if (r > 0) v[r - 1] = t1 - t0;
    }
    *fwd = median(v, reps);
    oj_set_grad_enabled(E, true);
    if (backward) {
        for (int r = 0; r <= reps; r++) {
            oj_scope_begin(E);
            oj_tensor *o = f(in, ctx);
            oj_tensor *g = o ? oj_rand_normal(E, o->rank, o->shape, o->dtype, 0.0, 1.0) : NULL;
            sync_dev();
            double t0 = now_ms();
            oj_status st = g ? oj_backward_seeded(o, g, false) : oj_last_status(E);
            sync_dev();
            double t1 = now_ms();
            oj_scope_end(E);
            for (int i = 0; i < n_in; i++)
                if (in[i]) oj_zero_grad(in[i]);
            if (st != OJ_OK) {
                fprintf(stderr, "backward failed: %s\n", oj_last_error(E));
                oj_clear_error(E);
                break;
            }
            if (r > 0) v[r - 1] = t1 - t0;
            if (r == reps) *bwd = median(v, reps);
        }
    }
    oj_set_grad_enabled(E, prev);
}

static oj_tensor *leaf(int rank, const int64_t *shape, double std) {
    oj_tensor *t = oj_rand_normal(E, rank, shape, OJ_F32, 0.0, std);
    return oj_set_requires_grad(t, true);
}

static oj_tensor *tokens(int64_t n, int64_t V, uint64_t seed) {
    int64_t *tok = malloc((size_t)n * sizeof *tok);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tok[i] = (int64_t)(s % (uint64_t)V);
    }
    oj_tensor *t = oj_from_host(E, 1, (int64_t[1]){n}, OJ_I64, tok, (size_t)n * sizeof *tok);
    free(tok);
    return t;
}

/* Run one case and record its rows: flops/bytes of forward and backward. */
static void run_case(const char *name, op_fn f, oj_tensor *const *in, int n_in, void *ctx,
                     bool backward, double ff, double fb, double bf, double bb, int count) {
    double fwd, bwd;
    time_op(f, in, n_in, ctx, backward, &fwd, &bwd);
    add_row(name, "fwd", fwd, ff, fb, count);
    if (backward) add_row(name, "bwd", bwd, bf, bb, count);
    fprintf(stderr, "  %-40s fwd %.3f ms bwd %.3f ms\n", name, fwd, bwd);
}

/* ---------------------------------------------------------------- op cases */
static oj_tensor *f_embedding(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_embedding(in[0], in[1]);
}
static oj_tensor *f_linear(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_linear(in[0], in[1], in[2]);
}
static oj_tensor *f_layer_norm(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_layer_norm(in[0], in[1], in[2], 1e-5);
}
static oj_tensor *f_rms_norm(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_rms_norm(in[0], in[1], 1e-6);
}
/* [B, T, H, D] leaf viewed [B, H, T, D], normalised over D (the QK-norm). */
static oj_tensor *f_rms_norm_heads(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_rms_norm(oj_transpose(in[0], 1, 2), NULL, 1e-6);
}
static oj_tensor *f_rotary(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_rotary_embedding(in[0], 0, 10000.0);
}
/* q, k, v [B, T, H, D] leaves viewed [B, H, T, D], as the models do. */
static oj_tensor *f_sdpa_views(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_scaled_dot_product_attention(oj_transpose(in[0], 1, 2), oj_transpose(in[1], 1, 2),
                                           oj_transpose(in[2], 1, 2), NULL, true, NAN);
}
static oj_tensor *f_sdpa(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_scaled_dot_product_attention(in[0], in[1], in[2], NULL, true, NAN);
}
static oj_tensor *f_gelu_tanh(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_gelu_tanh(in[0]);
}
static oj_tensor *f_silu_mul(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_mul(oj_silu(in[0]), in[1]);
}
static oj_tensor *f_add(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_add(in[0], in[1]);
}
/* y [B, H, T, D] * sigmoid gate [B, T, H] viewed [B, H, T, 1] (nanolab). */
static oj_tensor *f_gate(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_mul(in[0], oj_unsqueeze(oj_transpose(oj_sigmoid(in[1]), 1, 2), 3));
}
static oj_tensor *f_cross_entropy(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_cross_entropy(in[0], in[1], -1, 0.0, OJ_REDUCTION_MEAN);
}
/* [B, H, T, D] -> transpose(1, 2) -> reshape [B, T, H*D] (a copy). */
static oj_tensor *f_merge_heads(oj_tensor *const *in, void *c) {
    (void)c;
    int64_t s[3] = {in[0]->shape[0], in[0]->shape[2], in[0]->shape[1] * in[0]->shape[3]};
    return oj_reshape(oj_transpose(in[0], 1, 2), 3, s);
}
static oj_tensor *f_newton_schulz(oj_tensor *const *in, void *c) {
    (void)c;
    return oj_newton_schulz5(in[0], 5);
}

/* ---------------------------------------------------------------- per preset */
static void linear_case(const char *what, int64_t N, int64_t in, int64_t out, bool bias,
                        int count) {
    oj_scope_begin(E);
    oj_tensor *x = leaf(2, (int64_t[2]){N, in}, 1.0);
    oj_tensor *w = leaf(2, (int64_t[2]){out, in}, 0.02);
    oj_tensor *b = bias ? leaf(1, (int64_t[1]){out}, 0.02) : NULL;
    oj_tensor *ins[3] = {x, w, b};
    char name[64];
    snprintf(name, sizeof name, "linear %s %lldx%lld->%lld", what, (long long)N, (long long)in,
             (long long)out);
    double fl = 2.0 * (double)N * (double)in * (double)out;
    double by = 4.0 * ((double)N * in + (double)in * out + (double)N * out);
    run_case(name, f_linear, ins, 3, NULL, true, fl, by, 2 * fl, 2 * by, count);
    oj_scope_end(E);
}

static void bench_preset(bool gpt2, int64_t B, int64_t T) {
    const int64_t C = 768, H = 12, D = 64, V = 50304, L = 12, N = B * T;
    const int64_t F = gpt2 ? 3072 : 2048;
    const double f4 = 4.0, NC = (double)N * C;
    fprintf(stderr, "== %s\n", gpt2 ? "gpt2-124m" : "nanolab-124m");
    oj_scope_begin(E);
    /* embedding (gathers N rows; backward sorts and sums rows) */
    {
        oj_tensor *w = leaf(2, (int64_t[2]){V, C}, 0.02);
        oj_tensor *idx = tokens(N, V, 88172645463325252ull);
        oj_tensor *in[2] = {w, idx};
        run_case("embedding wte", f_embedding, in, 1, NULL, true, 0, f4 * 2 * NC, 0,
                 f4 * (2 * NC + (double)V * C), 1);
    }
    /* linears */
    if (gpt2) {
        linear_case("qkv", N, C, 3 * C, true, (int)L);
        linear_case("attn proj", N, C, C, true, (int)L);
        linear_case("fc", N, C, F, true, (int)L);
        linear_case("mlp proj", N, F, C, true, (int)L);
    } else {
        linear_case("q/k/v", N, C, C, false, (int)(3 * L));
        linear_case("gate", N, C, H, true, (int)L);
        linear_case("o", N, C, C, false, (int)L);
        linear_case("w_gate/w_up", N, C, F, false, (int)(2 * L));
        linear_case("w_down", N, F, C, false, (int)L);
    }
    linear_case("lm head", N, C, V, false, 1);
    /* norms over C */
    {
        oj_scope_begin(E);
        oj_tensor *x = leaf(2, (int64_t[2]){N, C}, 1.0);
        oj_tensor *w = leaf(1, (int64_t[1]){C}, 1.0);
        oj_tensor *b = gpt2 ? leaf(1, (int64_t[1]){C}, 0.1) : NULL;
        oj_tensor *in[3] = {x, w, b};
        if (gpt2)
            run_case("layer_norm [N,768]", f_layer_norm, in, 3, NULL, true, 8 * NC, f4 * 2 * NC,
                     12 * NC, f4 * 3 * NC, (int)(2 * L + 1));
        else
            run_case("rms_norm [N,768]", f_rms_norm, in, 2, NULL, true, 4 * NC, f4 * 2 * NC,
                     8 * NC, f4 * 3 * NC, (int)(2 * L + 1));
        oj_scope_end(E);
    }
    if (!gpt2) { /* QK-norm on head views, rotary, value gate */
        oj_scope_begin(E);
        oj_tensor *x = leaf(4, (int64_t[4]){B, T, H, D}, 1.0);
        oj_tensor *in1[1] = {x};
        run_case("rms_norm qk (from [B,T,H,D] view)", f_rms_norm_heads, in1, 1, NULL, true,
                 4 * NC, f4 * 2 * NC, 8 * NC, f4 * 3 * NC, (int)(2 * L));
        oj_tensor *xr = leaf(4, (int64_t[4]){B, H, T, D}, 1.0);
        oj_tensor *in2[1] = {xr};
        run_case("rotary [B,H,T,D]", f_rotary, in2, 1, NULL, true, 6 * NC, f4 * 2 * NC, 6 * NC,
                 f4 * 2 * NC, (int)(2 * L));
        oj_tensor *g = leaf(3, (int64_t[3]){B, T, H}, 1.0);
        oj_tensor *in3[2] = {xr, g};
        run_case("sigmoid gate * y", f_gate, in3, 2, NULL, true, NC, f4 * 2 * NC, 3 * NC,
                 f4 * 3 * NC, (int)L);
        oj_scope_end(E);
    }
    /* attention: causal, B H T D; FLOPs 4 B H T^2 D / 2 forward, 2.5x backward */
    {
        oj_scope_begin(E);
        double fl = 4.0 * (double)B * H * (double)T * T * D / 2;
        double by = f4 * 4 * NC;
        oj_tensor *q = leaf(4, (int64_t[4]){B, T, H, D}, 1.0);
        oj_tensor *k = leaf(4, (int64_t[4]){B, T, H, D}, 1.0);
        oj_tensor *v = leaf(4, (int64_t[4]){B, T, H, D}, 1.0);
        oj_tensor *in[3] = {q, k, v};
        run_case("sdpa causal (q,k,v [B,T,H,D] views)", f_sdpa_views, in, 3, NULL, true, fl, by,
                 2.5 * fl, 2 * by, (int)L);
        oj_tensor *q2 = leaf(4, (int64_t[4]){B, H, T, D}, 1.0);
        oj_tensor *k2 = leaf(4, (int64_t[4]){B, H, T, D}, 1.0);
        oj_tensor *v2 = leaf(4, (int64_t[4]){B, H, T, D}, 1.0);
        oj_tensor *in2[3] = {q2, k2, v2};
        run_case("sdpa causal (contiguous)", f_sdpa, in2, 3, NULL, true, fl, by, 2.5 * fl,
                 2 * by, 0);
        oj_tensor *in3[1] = {q2};
        run_case("merge heads (transpose+reshape copy)", f_merge_heads, in3, 1, NULL, true, 0,
                 f4 * 2 * NC, 0, f4 * 2 * NC, (int)L);
        oj_scope_end(E);
    }
    /* MLP activation */
    {
        oj_scope_begin(E);
        double NF = (double)N * F;
        oj_tensor *u = leaf(2, (int64_t[2]){N, F}, 1.0);
        if (gpt2) {
            oj_tensor *in[1] = {u};
            run_case("gelu_tanh [N,3072]", f_gelu_tanh, in, 1, NULL, true, 10 * NF, f4 * 2 * NF,
                     20 * NF, f4 * 3 * NF, (int)L);
        } else {
            oj_tensor *u2 = leaf(2, (int64_t[2]){N, F}, 1.0);
            oj_tensor *in[2] = {u, u2};
            run_case("silu(a)*b [N,2048]", f_silu_mul, in, 2, NULL, true, 6 * NF, f4 * 4 * NF,
                     12 * NF, f4 * 7 * NF, (int)L);
        }
        oj_scope_end(E);
    }
    /* residual add */
    {
        oj_scope_begin(E);
        oj_tensor *a = leaf(3, (int64_t[3]){B, T, C}, 1.0), *b = leaf(3, (int64_t[3]){B, T, C}, 1.0);
        oj_tensor *in[2] = {a, b};
        run_case("add [B,T,768]", f_add, in, 2, NULL, true, NC, f4 * 3 * NC, 0, f4 * 3 * NC,
                 (int)(2 * L + (gpt2 ? 1 : 0)));
        oj_scope_end(E);
    }
    /* cross-entropy over [N, V] */
    {
        oj_scope_begin(E);
        oj_tensor *lg = leaf(2, (int64_t[2]){N, V}, 1.0);
        oj_tensor *t = tokens(N, V, 1234567ull);
        oj_tensor *in[2] = {lg, t};
        double NV = (double)N * V;
        run_case("cross_entropy [N,50304]", f_cross_entropy, in, 1, NULL, true, 3 * NV, f4 * NV,
                 3 * NV, f4 * 2 * NV, 1);
        oj_scope_end(E);
    }
    oj_scope_end(E);
    /* optimizer: the preset's whole model and optimizer, gradients from one
     * small step (B 1, T 64) */
    {
        oj_scope_begin(E);
        oj_gpt_config mc;
        oj_gpt_preset(gpt2 ? "gpt2-124m" : "nanolab-124m", &mc);
        if (gpt2) mc.vocab_size = 50304;
        oj_gpt *m = NULL;
        if (oj_gpt_create(E, &mc, 1, &m) == OJ_OK) {
            oj_named_tensors sd = oj_gpt_state_dict(m);
            oj_optim *opt = oj_optim_create(E);
            oj_optim_hparams adamw = oj_adamw_hparams(6e-4, 0.1), muon = oj_muon_hparams(0.02);
            if (gpt2) oj_optim_add_group(opt, &adamw, &sd);
            else oj_optim_add_muon_split(opt, &sd, &muon, &adamw, NULL, NULL);
            oj_optim_set_check_update(opt, false);
            oj_tensor *x = tokens(64, 50304, 99ull), *y = tokens(64, 50304, 98ull);
            int64_t s2[2] = {1, 64};
            oj_tensor *x2 = oj_reshape(x, 2, s2), *y2 = oj_reshape(y, 2, s2);
            oj_tensor *loss = oj_gpt_loss(m, x2, y2);
            if (loss && oj_backward(loss, false) == OJ_OK) {
                double P = (double)oj_gpt_num_params(m), v[64];
                int reps = REPS < 64 ? REPS : 63;
                for (int pass = 0; pass < (gpt2 ? 2 : 1); pass++) {
                    for (int r = 0; r <= reps; r++) {
                        oj_optim_step_info info;
                        sync_dev();
                        double t0 = now_ms();
                        if (pass == 0) oj_optim_step(opt, &info);
                        else oj_optim_clip_grad_norm(opt, 1e9);
                        sync_dev();
                        if (r > 0) v[r - 1] = now_ms() - t0;
                        oj_clear_error(E);
                    }
                    double ms = median(v, reps);
                    if (pass == 0)
                        add_row(gpt2 ? "AdamW step (all 124M params)"
                                     : "Muon+AdamW step (whole model)",
                                "", ms, gpt2 ? 12 * P : 0, gpt2 ? 28 * P : 28 * P, 1);
                    else
                        add_row("clip_grad_norm (all params)", "", ms, 2 * P, 4 * P, 1);
                    fprintf(stderr, "  optimizer pass %d: %.3f ms\n", pass, ms);
                }
            } else {
                fprintf(stderr, "optimizer setup failed: %s\n", oj_last_error(E));
                oj_clear_error(E);
            }
            oj_optim_free(opt);
            oj_gpt_free(m);
        }
        if (!gpt2) { /* Newton-Schulz alone on the two hidden shapes */
            int64_t shapes[2][2] = {{768, 768}, {2048, 768}};
            for (int i = 0; i < 2; i++) {
                oj_tensor *g = leaf(2, shapes[i], 1.0);
                oj_set_requires_grad(g, false);
                oj_tensor *in[1] = {g};
                double mm = (double)(shapes[i][0] < shapes[i][1] ? shapes[i][0] : shapes[i][1]);
                double nn = (double)(shapes[i][0] > shapes[i][1] ? shapes[i][0] : shapes[i][1]);
                /* per iteration: A = X X^T (2 m^2 n), A^2 (2 m^3), B X (2 m^2 n) */
                double fl = 5 * (4 * mm * mm * nn + 2 * mm * mm * mm);
                char name[64];
                snprintf(name, sizeof name, "newton_schulz5 %lldx%lld", (long long)shapes[i][0],
                         (long long)shapes[i][1]);
                run_case(name, f_newton_schulz, in, 1, NULL, false, fl, 4.0 * 20 * mm * nn, 0, 0,
                         i == 0 ? (int)(4 * L) : (int)(3 * L));
            }
        }
        oj_scope_end(E);
    }
    print_table(gpt2 ? "gpt2-124m" : "nanolab-124m", (double)B, (double)T);
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int64_t B = argc > 2 ? atoll(argv[2]) : 16, T = argc > 3 ? atoll(argv[3]) : 1024;
    if (argc > 4) REPS = atoi(argv[4]);
    if (REPS < 1) REPS = 1;
    if (getenv("TF32_TFLOPS")) TF_LIMIT = atof(getenv("TF32_TFLOPS"));
    if (getenv("HBM_GBS")) BW_LIMIT = atof(getenv("HBM_GBS"));
    if (bench_cuda_engine(OJ_NUMERICS_FAST, &E)) return 77;
    printf("bench_gpu_ops: B=%lld T=%lld reps=%d, f32 params, TF32 GEMMs (FAST); limits %.0f "
           "TFLOP/s (GEMM-like ops), %.0f GB/s (the rest)\n",
           (long long)B, (long long)T, REPS, TF_LIMIT, BW_LIMIT);
    if (strcmp(which, "all") == 0 || strcmp(which, "nanolab") == 0) bench_preset(false, B, T);
    if (strcmp(which, "all") == 0 || strcmp(which, "gpt2") == 0) bench_preset(true, B, T);
    oj_engine_free(E);
    return 0;
}
