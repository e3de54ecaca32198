/* ojas CPU against PyTorch CPU (Debian python3-torch 1.13), side by side in
 * one run: softmax, layer_norm, gelu_tanh (GELU, tanh form) and gelu_erf
 * (GELU, exact erf form) forward+backward on [N, C], causal
 * attention forward+backward, one GPT-2 transformer block forward+backward
 * (d 256, 8 heads, T 256, B 8) and a 4-layer GPT training step (AdamW,
 * vocab 4096), the shapes of ../shared/anchors/cpu/torch_bench.py.
 *
 * usage: bench_cpu_torch [--threads N] [--parts a,b,..] [--iters N]
 *                        [--exact] [--no-peer] [--smoke]
 * The peer runs as `python3 bench/cpu/torch_peer.py` with its best settings
 * from the anchors (OpenBLAS core auto-detected, glibc malloc keeping freed
 * memory with THP, ATen AVX-512, passive OpenMP waits, same threads).
 * Prints per part: ojas ms, torch ms, and torch/ojas (> 1: ojas faster).
 * --smoke: small shapes, one iteration, no peer (CI; a few seconds). */
#include <math.h>

#include "bench_cpu_common.h"
#include "ojas/autograd.h"
#include "ojas/gpt.h"
#include "ojas/ops.h"
#include "ojas/optim.h"

#ifdef OJAS_HAVE_OPENBLAS
char *openblas_get_corename(void);
#endif

typedef struct {
    int threads, iters, warmup, smoke, peer;
    oj_numerics numerics;
    int64_t d, heads, T, B, layers, vocab, N, C;
} opts;

static oj_tensor *randn(oj_engine *eng, int rank, const int64_t *shape, double std, bool grad) {
    oj_tensor *t = oj_rand_normal(eng, rank, shape, OJ_F32, 0.0, std);
    if (t && grad) oj_set_requires_grad(t, true);
    return t;
}

static void check(oj_engine *eng, const char *what) {
    if (oj_last_status(eng) != OJ_OK) {
        fprintf(stderr, "%s: %s\n", what, oj_last_error(eng));
        exit(1);
    }
}

/* ---------------------------------------------------------------- block */

typedef struct {
    oj_tensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fc2w, *fc2b;
} block_params;

static void block_init(oj_engine *eng, block_params *p, int64_t d) {
    int64_t s_d[1] = {d}, s_3d[1] = {3 * d}, s_4d[1] = {4 * d};
    int64_t s_qkv[2] = {3 * d, d}, s_proj[2] = {d, d}, s_fc[2] = {4 * d, d}, s_fc2[2] = {d, 4 * d};
    p->ln1w = oj_set_requires_grad(oj_ones(eng, 1, s_d, OJ_F32), true);
    p->ln1b = oj_set_requires_grad(oj_zeros(eng, 1, s_d, OJ_F32), true);
    p->ln2w = oj_set_requires_grad(oj_ones(eng, 1, s_d, OJ_F32), true);
    p->ln2b = oj_set_requires_grad(oj_zeros(eng, 1, s_d, OJ_F32), true);
    p->qkvw = randn(eng, 2, s_qkv, 0.02, true);
    p->qkvb = oj_set_requires_grad(oj_zeros(eng, 1, s_3d, OJ_F32), true);
    p->projw = randn(eng, 2, s_proj, 0.02, true);
    p->projb = oj_set_requires_grad(oj_zeros(eng, 1, s_d, OJ_F32), true);
    p->fcw = randn(eng, 2, s_fc, 0.02, true);
    p->fcb = oj_set_requires_grad(oj_zeros(eng, 1, s_4d, OJ_F32), true);
    p->fc2w = randn(eng, 2, s_fc2, 0.02, true);
    p->fc2b = oj_set_requires_grad(oj_zeros(eng, 1, s_d, OJ_F32), true);
    check(eng, "block init");
}

// x (B,T,C) -> (B,T,C): x + attn(ln1(x)), then + mlp(ln2(.))
static oj_tensor *block_forward(const block_params *p, oj_tensor *x, int64_t H) {
    int64_t B = oj_size(x, 0), T = oj_size(x, 1), C = oj_size(x, 2), D = C / H;
    oj_tensor *h = oj_layer_norm(x, p->ln1w, p->ln1b, 1e-5);
    oj_tensor *qkv = oj_linear(h, p->qkvw, p->qkvb); // (B,T,3C)
    int64_t s5[5] = {B, T, 3, H, D};
    oj_tensor *r = oj_view(qkv, 5, s5);
    oj_tensor *q = oj_transpose(oj_select(r, 2, 0), 1, 2); // (B,H,T,D)
    oj_tensor *k = oj_transpose(oj_select(r, 2, 1), 1, 2);
    oj_tensor *v = oj_transpose(oj_select(r, 2, 2), 1, 2);
    oj_tensor *y = oj_scaled_dot_product_attention(q, k, v, NULL, true, NAN); // (B,H,T,D)
    int64_t s3[3] = {B, T, C};
    y = oj_reshape(oj_transpose(y, 1, 2), 3, s3);
    x = oj_add(x, oj_linear(y, p->projw, p->projb));
    h = oj_layer_norm(x, p->ln2w, p->ln2b, 1e-5);
    h = oj_linear(oj_gelu_tanh(oj_linear(h, p->fcw, p->fcb)), p->fc2w, p->fc2b);
    return oj_add(x, h);
}

static void block_zero_grad(block_params *p) {
    oj_tensor **t = (oj_tensor **)p;
    for (size_t i = 0; i < sizeof *p / sizeof *t; i++) oj_zero_grad(t[i]);
}

/* ---------------------------------------------------------------- timing */

typedef void (*step_fn)(void *ctx);

static double time_steps(const opts *o, step_fn fn, void *ctx) {
    for (int i = 0; i < o->warmup; i++) fn(ctx);
    double ts[256];
    int n = o->iters < 256 ? o->iters : 256;
    for (int i = 0; i < n; i++) {
        double t0 = bc_now();
        fn(ctx);
        ts[i] = (bc_now() - t0) * 1e3;
    }
    return bc_median(ts, n);
}

typedef struct {
    oj_engine *eng;
    const opts *o;
    block_params bp;
    oj_tensor *x, *q, *k, *v, *w, *b, *gy;
    oj_gpt *gpt;
    oj_optim *opt;
    oj_tensor *idx, *tgt;
    const char *op;
} bench_ctx;

static void block_step(void *vc) {
    bench_ctx *c = vc;
    oj_scope_begin(c->eng);
    block_zero_grad(&c->bp);
    oj_zero_grad(c->x);
    oj_tensor *y = block_forward(&c->bp, c->x, c->o->heads);
    oj_backward(oj_sum_all(y), false);
    check(c->eng, "block");
    oj_scope_end(c->eng);
}

static void attention_step(void *vc) {
    bench_ctx *c = vc;
    oj_scope_begin(c->eng);
    oj_zero_grad(c->q);
    oj_zero_grad(c->k);
    oj_zero_grad(c->v);
    oj_tensor *y = oj_scaled_dot_product_attention(c->q, c->k, c->v, NULL, true, NAN);
    oj_backward(oj_sum_all(y), false);
    check(c->eng, "attention");
    oj_scope_end(c->eng);
}

static void rowop_step(void *vc) {
    bench_ctx *c = vc;
    oj_scope_begin(c->eng);
    oj_zero_grad(c->x);
    oj_zero_grad(c->w);
    oj_zero_grad(c->b);
    oj_tensor *y = NULL;
    if (strcmp(c->op, "softmax") == 0) y = oj_softmax(c->x, -1);
    else if (strcmp(c->op, "layer_norm") == 0) y = oj_layer_norm(c->x, c->w, c->b, 1e-5);
    else if (strcmp(c->op, "gelu_erf") == 0) y = oj_gelu(c->x);
    else y = oj_gelu_tanh(c->x);
    oj_backward_seeded(y, c->gy, false);
    check(c->eng, c->op);
    oj_scope_end(c->eng);
}

static void gpt_step(void *vc) {
    bench_ctx *c = vc;
    oj_scope_begin(c->eng);
    oj_tensor *loss = oj_gpt_loss(c->gpt, c->idx, c->tgt);
    oj_backward(loss, false);
    oj_optim_step(c->opt, NULL);
    oj_optim_zero_grad(c->opt);
    check(c->eng, "gpt step");
    oj_scope_end(c->eng);
}

static oj_tensor *rand_tokens(oj_engine *eng, int64_t B, int64_t T, int64_t V, uint32_t s) {
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

/* ojas time (ms, median) of one part. */
static double run_ojas(const opts *o, const char *part) {
    bench_ctx c = {.o = o, .op = part};
    c.eng = bc_engine(o->threads, o->numerics);
    double ms = -1;
    if (strcmp(part, "block") == 0) {
        block_init(c.eng, &c.bp, o->d);
        int64_t s[3] = {o->B, o->T, o->d};
        c.x = randn(c.eng, 3, s, 1.0, true);
        ms = time_steps(o, block_step, &c);
    } else if (strcmp(part, "attention") == 0) {
        int64_t s[4] = {o->B, o->heads, o->T, o->d / o->heads};
        c.q = randn(c.eng, 4, s, 1.0, true);
        c.k = randn(c.eng, 4, s, 1.0, true);
        c.v = randn(c.eng, 4, s, 1.0, true);
        ms = time_steps(o, attention_step, &c);
    } else if (strcmp(part, "gpt") == 0) {
        oj_gpt_config cfg;
        oj_gpt_preset("gpt2-tiny", &cfg);
        cfg.vocab_size = o->vocab;
        cfg.block_size = o->T;
        cfg.n_layer = o->layers;
        cfg.n_head = cfg.n_kv_head = o->heads;
        cfg.n_embd = o->d;
        cfg.mlp_hidden = 4 * o->d;
        if (oj_gpt_create(c.eng, &cfg, 1, &c.gpt) != OJ_OK) check(c.eng, "gpt create");
        c.opt = oj_optim_create(c.eng);
        oj_optim_hparams hp = oj_adamw_hparams(3e-4, 0.1);
        hp.beta2 = 0.95;
        oj_named_tensors sd = oj_gpt_state_dict(c.gpt);
        if (oj_optim_add_group(c.opt, &hp, &sd) < 0) check(c.eng, "optim");
        c.idx = rand_tokens(c.eng, o->B, o->T, o->vocab, 1);
        c.tgt = rand_tokens(c.eng, o->B, o->T, o->vocab, 2);
        ms = time_steps(o, gpt_step, &c);
        oj_optim_free(c.opt);
        oj_gpt_free(c.gpt);
    } else {
        int64_t s[2] = {o->N, o->C}, sc[1] = {o->C};
        c.x = randn(c.eng, 2, s, 1.0, true);
        c.gy = randn(c.eng, 2, s, 1.0, false);
        c.w = oj_set_requires_grad(oj_ones(c.eng, 1, sc, OJ_F32), true);
        c.b = oj_set_requires_grad(oj_zeros(c.eng, 1, sc, OJ_F32), true);
        ms = time_steps(o, rowop_step, &c);
    }
    oj_engine_free(c.eng);
    return ms;
}

static double run_peer(const opts *o, const char *root, const char *part) {
    char cmd[8192], out[8192];
    snprintf(cmd, sizeof cmd,
             "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=%d "
             "OPENBLAS_NUM_THREADS=%d OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 "
             "ATEN_CPU_CAPABILITY=avx512 GLIBC_TUNABLES=glibc.malloc.hugetlb=1:"
             "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736 "
             "/usr/bin/python3 %s/bench/cpu/torch_peer.py --threads %d --part %s --iters %d "
             "--warmup %d --d %lld --heads %lld --T %lld --B %lld --layers %lld --vocab %lld "
             "--N %lld --C %lld 2>/dev/null",
             o->threads, o->threads, root, o->threads, part, o->iters, o->warmup,
             (long long)o->d, (long long)o->heads, (long long)o->T, (long long)o->B,
             (long long)o->layers, (long long)o->vocab, (long long)o->N, (long long)o->C);
    if (!bc_run(cmd, out, sizeof out)) return -1;
    return bc_json_num(out, "ms");
}

int main(int argc, char **argv) {
    opts o = {.threads = 1, .iters = 10, .warmup = 2, .peer = 1, .numerics = OJ_NUMERICS_FAST,
              .d = 256, .heads = 8, .T = 256, .B = 8, .layers = 4, .vocab = 4096,
              .N = 2048, .C = 1024};
    const char *parts = "softmax,layer_norm,gelu_tanh,gelu_erf,attention,block,gpt";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) o.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--parts") && i + 1 < argc) parts = argv[++i];
        else if (!strcmp(argv[i], "--exact")) o.numerics = OJ_NUMERICS_EXACT;
        else if (!strcmp(argv[i], "--no-peer")) o.peer = 0;
        else if (!strcmp(argv[i], "--smoke")) o.smoke = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--parts list] [--iters N] [--exact] "
                            "[--no-peer] [--smoke]\n", argv[0]);
            return 2;
        }
    }
    if (o.smoke) {
        o.iters = 1, o.warmup = 0, o.peer = 0;
        o.d = 64, o.heads = 4, o.T = 32, o.B = 2, o.layers = 2, o.vocab = 256, o.N = 64, o.C = 96;
    }
    char root[PATH_MAX], cpu[256];
    bc_find_root(root, sizeof root);
    bc_cpu_model(cpu, sizeof cpu);
    printf("bench_cpu_torch: %s, threads %d, numerics %s", cpu, o.threads,
           o.numerics == OJ_NUMERICS_EXACT ? "exact" : "fast");
#ifdef OJAS_HAVE_OPENBLAS
    printf(", OpenBLAS core %s", openblas_get_corename());
#endif
    printf("\nshapes: row ops [%lld, %lld]; attention/block/gpt d %lld, heads %lld, T %lld, B %lld; "
           "gpt %lld layers, vocab %lld\n",
           (long long)o.N, (long long)o.C, (long long)o.d, (long long)o.heads, (long long)o.T,
           (long long)o.B, (long long)o.layers, (long long)o.vocab);
    printf("%-12s %12s %12s %14s\n", "part", "ojas ms", "torch ms", "torch/ojas");
    char list[256];
    snprintf(list, sizeof list, "%s", parts);
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        double a = run_ojas(&o, p);
        double b = o.peer ? run_peer(&o, root, p) : -1;
        if (b > 0)
            printf("%-12s %12.3f %12.3f %13.2fx\n", p, a, b, b / a);
        else
            printf("%-12s %12.3f %12s %14s\n", p, a, "-", "-");
        fflush(stdout);
    }
    return 0;
}
