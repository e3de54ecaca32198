/* The gated optimizer step's fixture, shared by the CPU check of its host
 * logic (test_optim_gate.c, a gate emulated on the CPU) and the CUDA one
 * (tests/gpu/test_gpu_train.c): six parameters in three groups, fresh
 * gradients per step, and og_compare, which runs oj__optim_clip_step
 * beside oj_optim_clip_grad_norm + oj_optim_step and compares the bits. */
#ifndef OJAS_OPTIM_GATE_TESTUTIL_H
#define OJAS_OPTIM_GATE_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ojas/ojas.h"
#include "optim/optim_internal.h"

/* ---------------------------------------------------------------- the gated step */

enum { OG_NP = 6 }; /* parameters of the gated-step fixture */

/* One side of the gated-step fixture: its parameters and optimizer. */
typedef struct {
    oj_tensor *w[OG_NP];
    oj_optim *o;
} og_side;

static const char *const og_k_name[OG_NP] = {"h.0.w", "h.1.w", "emb.w", "norm.b", "scale.x", "f64.w"};
static const int64_t og_k_shape[OG_NP][2] = {{48, 80}, {80, 48}, {64, 40}, {40, 1}, {1, 1}, {24, 16}};
static const int og_k_rank[OG_NP] = {2, 2, 2, 1, 1, 2};

/* Parameters from the seed (the same values for the same seed), in three
 * groups: Muon on the two hidden matrices, AdamW (wd 0.1) on emb.w and
 * f64.w, Adam with an L2 term (wd 10) on norm.b and the one-element
 * scale.x. */
static inline void og_side_make(oj_engine *eng, og_side *s) {
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < OG_NP; i++) {
        oj_dtype dt = i == 5 ? OJ_F64 : OJ_F32;
        int64_t n = og_k_shape[i][0] * og_k_shape[i][1];
        double *v = malloc((size_t)n * sizeof *v);
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t j = 0; j < n; j++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            v[j] = ((double)(st >> 11) * 0x1p-53 - 0.5) * 0.2;
            f[j] = (float)v[j];
        }
        int64_t shape[2] = {og_k_shape[i][0], og_k_shape[i][1]};
        if (og_k_rank[i] == 1) shape[0] = n;
        s->w[i] = oj_from_host(eng, og_k_rank[i], shape, dt, dt == OJ_F64 ? (void *)v : (void *)f,
                               (size_t)n * oj_dtype_size(dt));
        free(v);
        free(f);
        assert_non_null(s->w[i]);
        assert_non_null(oj_set_requires_grad(s->w[i], true));
    }
    s->o = oj_optim_create(eng);
    assert_non_null(s->o);
    oj_optim_hparams mu = oj_muon_hparams(0.02), aw = oj_adamw_hparams(1e-3, 0.1);
    oj_optim_hparams l2 = oj_adam_hparams(1e-3);
    l2.weight_decay = 10.0;
    oj_named_tensors g0 = {2, (const char **)og_k_name, s->w};
    const char *n1[2] = {og_k_name[2], og_k_name[5]}, *n2[2] = {og_k_name[3], og_k_name[4]};
    oj_tensor *t1[2] = {s->w[2], s->w[5]}, *t2[2] = {s->w[3], s->w[4]};
    oj_named_tensors g1 = {2, n1, t1}, g2 = {2, n2, t2};
    assert_int_equal(oj_optim_add_group(s->o, &mu, &g0), 0);
    assert_int_equal(oj_optim_add_group(s->o, &aw, &g1), 1);
    assert_int_equal(oj_optim_add_group(s->o, &l2, &g2), 2);
}

/* Fresh gradients: d/dw of sum(w * r) is r, r drawn from the step's seed
 * times amp (the same on both sides); with inf, one element of h.1.w's is
 * infinite. */
static inline void og_side_grads(og_side *s, int step, double amp, bool inf) {
    oj_engine *eng = oj_tensor_engine(s->w[0]);
    oj_optim_zero_grad(s->o);
    oj_scope_begin(eng);
    uint64_t st = 0x9e3779b97f4a7c15ull + (uint64_t)step * 7919u;
    oj_tensor *loss = NULL;
    for (int i = 0; i < OG_NP; i++) {
        int64_t n = oj_numel(s->w[i]);
        double *v = malloc((size_t)n * sizeof *v);
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t j = 0; j < n; j++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            v[j] = ((double)(st >> 11) * 0x1p-53 - 0.5) * amp;
            f[j] = (float)v[j];
        }
        if (inf && i == 1) f[7] = INFINITY;
        oj_dtype dt = oj_tensor_dtype(s->w[i]);
        int64_t shape[2];
        for (int d = 0; d < oj_rank(s->w[i]); d++) shape[d] = oj_shape(s->w[i])[d];
        oj_tensor *r = oj_from_host(eng, oj_rank(s->w[i]), shape, dt,
                                    dt == OJ_F64 ? (void *)v : (void *)f,
                                    (size_t)n * oj_dtype_size(dt));
        free(v);
        free(f);
        oj_tensor *term = oj_sum(oj_mul(s->w[i], r), 0, NULL, false);
        if (oj_tensor_dtype(term) != OJ_F32) term = oj_cast(term, OJ_F32);
        loss = loss ? oj_add(loss, term) : term;
    }
    assert_non_null(loss);
    if (oj_backward(loss, false) != OJ_OK) fail_msg("backward: %s", oj_last_error(eng));
    oj_scope_end(eng);
}

/* t's values = v, written with grad mode off on t's engine. */
static inline void og_fill(oj_tensor *t, double v) {
    oj_engine *eng = oj_tensor_engine(t);
    bool prev = oj_set_grad_enabled(eng, false);
    assert_int_equal(oj_fill_(t, v), OJ_OK);
    oj_set_grad_enabled(eng, prev);
}

/* The bytes of two tensors of one dtype and size are equal. */
static inline void og_same_tensor(oj_tensor *a, oj_tensor *b, const char *what, int step) {
    assert_int_equal(oj_tensor_dtype(a), oj_tensor_dtype(b));
    assert_int_equal(oj_numel(a), oj_numel(b));
    size_t nb = (size_t)oj_numel(a) * oj_dtype_size(oj_tensor_dtype(a));
    unsigned char *x = malloc(nb), *y = malloc(nb);
    assert_int_equal(oj_to_host(a, x, nb), OJ_OK);
    assert_int_equal(oj_to_host(b, y, nb), OJ_OK);
    bool same = memcmp(x, y, nb) == 0;
    free(x);
    free(y);
    if (!same) fail_msg("step %d: %s differs between the gated and the checked step", step, what);
}

/* One step of both sides from the same fresh gradients (og_side_grads of
 * step, amplitude 4, max_norm 1): a through oj__optim_clip_step, b through
 * oj_optim_clip_grad_norm + oj_optim_step. The same status, message, step
 * info, parameters and optimizer state, bit for bit; the status. */
static inline oj_status og_step_both(og_side *a, og_side *b, int step) {
    oj_engine *ea = oj_tensor_engine(a->w[0]), *eb = oj_tensor_engine(b->w[0]);
    og_side_grads(a, step, 4.0, false);
    og_side_grads(b, step, 4.0, false);
    double na = NAN;
    oj_optim_step_info ia, ib;
    oj_status sa = oj__optim_clip_step(a->o, 1.0, &na, &ia);
    double nb = oj_optim_clip_grad_norm(b->o, 1.0);
    oj_status sb = oj_optim_step(b->o, &ib);
    printf("  step %d: gated %s (%s), checked %s, proven so far %lld\n", step, oj_status_name(sa),
           oj_optim_message(a->o), oj_status_name(sb), (long long)a->o->checks_proven);
    if (oj_last_status(ea) != OJ_OK || oj_last_status(eb) != OJ_OK)
        fail_msg("step %d: an error was recorded: '%s' / '%s'", step, oj_last_error(ea),
                 oj_last_error(eb));
    assert_int_equal(sa, sb);
    assert_string_equal(oj_optim_message(a->o), oj_optim_message(b->o));
    assert_memory_equal(&na, &nb, sizeof na);
    assert_int_equal(ia.skipped, ib.skipped);
    assert_int_equal(ia.params_updated, ib.params_updated);
    for (int i = 0; i < OG_NP; i++) og_same_tensor(a->w[i], b->w[i], og_k_name[i], step);
    oj_named_tensors sa_ = {0}, sb_ = {0};
    assert_int_equal(oj_optim_state(a->o, &sa_), OJ_OK);
    assert_int_equal(oj_optim_state(b->o, &sb_), OJ_OK);
    assert_int_equal(sa_.n, sb_.n);
    for (int64_t i = 0; i < sa_.n; i++) og_same_tensor(sa_.tensors[i], sb_.tensors[i], sa_.names[i], step);
    return sa;
}

static inline void og_side_free(og_side *s) {
    oj_optim_free(s->o);
    for (int i = 0; i < OG_NP; i++) oj_release(s->w[i]);
}

/* oj__optim_clip_step on engine ea against oj_optim_clip_grad_norm +
 * oj_optim_step on engine eb (the same engine, or one of the same device
 * and numerics), from the same parameters and gradients, bit for bit: the norm before the clip, the step info, the
 * status and message, every parameter and every optimizer state tensor.
 * Steps: clipped (max_norm 1), not clipped (max_norm 1e6), no clip
 * (max_norm 0: the norm alone), an infinite gradient (skipped, the
 * gradient named), a finite gradient whose Adam update overflows
 * (scale.x = 3e38 with an L2 term: skipped, the update named), then a
 * clipped step again. Muon, AdamW, Adam, f32, f64 and a one-element
 * tensor take part. og_last_proven: the gated side's steps whose check
 * pass its bounds made unnecessary (steps 1 and 2 when gated). gated: ea's backend has the gate, which leaves the
 * gradients unscaled (the clip of the checked step scales them in place),
 * checked at the clipped first step. */
static int64_t og_last_proven; /* og_compare's gated side: checks_proven at its end */

/* oj__optim_clip_step_then's callback in og_compare: its calls, and the
 * optimizer's step count it saw (before the step's read-back on the gate,
 * after the step elsewhere). */
static int og_cb_calls;
static int64_t og_cb_steps_seen;
static inline void og_while_queued(void *ctx) {
    og_cb_calls++;
    og_cb_steps_seen = oj_optim_steps((const oj_optim *)ctx);
}
/* its rewind (ahead): calls */
static int og_rewind_calls;
static inline void og_rewind(void *ctx) {
    (void)ctx;
    og_rewind_calls++;
}

static inline void og_compare(oj_engine *ea, oj_engine *eb, bool gated, bool ahead) {
    og_side a, b;
    og_side_make(ea, &a);
    og_side_make(eb, &b);
    const double max_norm[] = {1.0, 1e6, 0.0, 1.0, 1.0, 1.0};
    for (int step = 0; step < 6; step++) {
        bool inf = step == 3, overflow = step == 4;
        if (overflow) {
            og_fill(a.w[4], 3e38);
            og_fill(b.w[4], 3e38);
        }
        og_side_grads(&a, step, 4.0, inf);
        og_side_grads(&b, step, 4.0, inf);
        double na = NAN, nb = NAN;
        oj_optim_step_info ia, ib;
        og_cb_calls = og_rewind_calls = 0;
        const int64_t steps0 = oj_optim_steps(a.o);
        const oj__step_hooks hooks = {
            .while_queued = og_while_queued, .ahead = ahead, .rewind = og_rewind, .ctx = a.o};
        oj_status sa = oj__optim_clip_step_then(a.o, max_norm[step], &na, &ia, &hooks);
        /* called once, skipped steps too; on the gate before the read-back */
        assert_int_equal(og_cb_calls, 1);
        /* ahead: the gradients put back before a refused update is named
         * (on the gate: the overflowing step) */
        assert_int_equal(og_rewind_calls, ahead && gated && overflow ? 1 : 0);
        assert_int_equal(og_cb_steps_seen, gated ? steps0 : oj_optim_steps(a.o));
        if (max_norm[step] > 0) {
            nb = oj_optim_clip_grad_norm(b.o, max_norm[step]);
        } else {
            oj_tensor *ps[OG_NP];
            for (int i = 0; i < OG_NP; i++) ps[i] = b.w[i];
            nb = oj_grad_norm(OG_NP, ps);
        }
        oj_status sb = oj_optim_step(b.o, &ib);
        if (step == 0) { /* clipped: the norm is ~119 */
            oj_tensor *ga = oj_grad(a.w[0]), *gb = oj_grad(b.w[0]);
            size_t nb_ = (size_t)oj_numel(ga) * sizeof(float);
            float *x = malloc(nb_), *y = malloc(nb_);
            assert_int_equal(oj_to_host(ga, x, nb_), OJ_OK);
            assert_int_equal(oj_to_host(gb, y, nb_), OJ_OK);
            bool same = memcmp(x, y, nb_) == 0;
            free(x);
            free(y);
            if (same == gated)
                fail_msg("the gradients were %s in place: the %s path ran", gated ? "scaled" : "not scaled",
                         gated ? "checked" : "gated");
        }
        printf("  step %d: gated %s norm %.17g (%s), checked %s norm %.17g\n", step,
               oj_status_name(sa), na, oj_optim_message(a.o), oj_status_name(sb), nb);
        if (oj_last_status(ea) != OJ_OK || oj_last_status(eb) != OJ_OK)
            fail_msg("step %d: an error was recorded: '%s' / '%s'", step, oj_last_error(ea),
                     oj_last_error(eb));
        assert_int_equal(sa, sb);
        assert_int_equal(sa, inf || overflow ? OJ_ERR_NUMERIC : OJ_OK);
        assert_string_equal(oj_optim_message(a.o), oj_optim_message(b.o));
        if (inf) assert_non_null(strstr(oj_optim_message(a.o), "gradient of 'h.1.w'"));
        if (overflow) assert_non_null(strstr(oj_optim_message(a.o), "update of 'scale.x'"));
        assert_memory_equal(&na, &nb, sizeof na);
        assert_memory_equal(&ia.grad_norm, &ib.grad_norm, sizeof ia.grad_norm);
        assert_int_equal(ia.skipped, ib.skipped);
        assert_int_equal(ia.params_updated, ib.params_updated);
        assert_int_equal(oj_optim_skipped_steps(a.o), oj_optim_skipped_steps(b.o));
        for (int i = 0; i < OG_NP; i++) og_same_tensor(a.w[i], b.w[i], og_k_name[i], step);
        oj_named_tensors sa_ = {0}, sb_ = {0};
        assert_int_equal(oj_optim_state(a.o, &sa_), OJ_OK);
        assert_int_equal(oj_optim_state(b.o, &sb_), OJ_OK);
        assert_int_equal(sa_.n, sb_.n);
        for (int64_t i = 0; i < sa_.n; i++) {
            assert_string_equal(sa_.names[i], sb_.names[i]);
            og_same_tensor(sa_.tensors[i], sb_.tensors[i], sa_.names[i], step);
        }
        if (overflow) { /* back to a finite parameter for the last step */
            og_fill(a.w[4], 0.5);
            og_fill(b.w[4], 0.5);
        }
    }
    og_last_proven = a.o->checks_proven;
    assert_int_equal(b.o->checks_proven, 0); /* the checked step proves nothing */
    oj_optim_free(a.o);
    oj_optim_free(b.o);
    for (int i = 0; i < OG_NP; i++) {
        oj_release(a.w[i]);
        oj_release(b.w[i]);
    }
}

#endif
