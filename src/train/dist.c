/* Data-parallel training: the trainer's use of an oj_dist process group
 * (docs/distributed.md).
 *
 * A step of grad_accum micro-batches is spread over the world_size ranks:
 * rank r takes micro-batches k * world_size + r (k < grad_accum /
 * world_size), which the loader's rank/world_size partition gives. Each
 * micro-batch's gradient is formed whole by its own backward and then
 * summed into the step's gradient in micro-batch order (j = 0, 1, ...): in
 * one process by adding it to the gradients so far, across ranks by
 * exchanging shards of the flat gradient (alltoall, bucket by bucket of at
 * most dist_bucket_bytes) and summing the received blocks in rank order on the
 * shard's owner, then gathering the summed shards (allgather). The additions are the same elementwise adds
 * in the same order either way, so the step's gradient, and everything
 * after it, has the same bits for every world size.
 *
 * ZeRO-1 (zero = 1): the trainable tensors are split into world_size runs
 * of whole tensors (balanced by elements); each rank's optimizer holds and
 * steps only its run, and the parameters are then gathered (allgatherv).
 * A checkpoint gathers the optimizer state on rank 0, which writes it as
 * one process would. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ojas/dist.h"
#include "ojas/io.h"
#include "ojas/ops.h"
#include "ojas/optim.h"
#include "optim/optim_internal.h"
#include "train/train_internal.h"

static oj_status eng_fail(oj_trainer *t, oj_error *err, const char *what) {
    oj_status st = oj_last_status(t->eng) ? oj_last_status(t->eng) : OJ_ERR_INTERNAL;
    oj_error_set(err, st, "%s: %s", what, oj_last_error(t->eng));
    oj_clear_error(t->eng);
    return st;
}

oj_status oj__train_check_world(const oj_train_config *c, int world, bool distributed,
                                oj_error *err) {
    if (c->grad_accum % world)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config: grad_accum %lld is not a multiple of the world size %d: each "
                            "rank takes grad_accum / world_size micro-batches of every step",
                            (long long)c->grad_accum, world);
    if (c->cuda_graph && c->grad_accum != world)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "config: cuda_graph needs one micro-batch per rank per step "
                            "(grad_accum = world size %d; got grad_accum %lld): the graph "
                            "rewrites the gradients each step",
                            world, (long long)c->grad_accum);
    /* the graph writes the gradient arena; the shard exchange (ZeRO-1, or
     * EXACT over several ranks) packs autograd's own gradients instead */
    if (distributed && c->cuda_graph &&
        (c->zero || (world > 1 && c->numerics == OJ_NUMERICS_EXACT)))
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "config: cuda_graph runs data parallel only where the gradients are "
                            "all-reduced: zero 0, and fast numerics with more than one rank "
                            "(--set cuda_graph=false for %s)",
                            c->zero ? "ZeRO-1" : "exact numerics");
    return OJ_OK;
}

oj_status oj__train_dist_setup(oj_trainer *t, oj_error *err) {
    const oj_train_config *c = &t->cfg;
    oj_dist *d = t->opts.dist;
    t->accum = c->grad_accum / t->world; /* oj__train_check_world: a multiple */
    t->distributed = oj_dist_active(d);
    if (c->zero && t->distributed && !oj_dist_mpi(d))
        return oj_error_set(err, OJ_ERR_UNSUPPORTED,
                            "config: zero 1 needs MPI (its checkpoints gather the optimizer "
                            "state in host messages), and this group comes from RANK/WORLD_SIZE "
                            "without it: start the ranks with mpirun, or zero=0");
    if (c->zero && !t->distributed)
        oj__train_say(t, "zero 1 without a process group (not started by mpirun): one process "
                         "keeps the whole optimizer state");
    t->collect = t->distributed || c->grad_accum > 1;
    oj_named_tensors sd = oj_gpt_state_dict(t->model);
    t->par = malloc(sizeof *t->par * (size_t)(sd.n ? sd.n : 1));
    t->par_off = malloc(sizeof *t->par_off * (size_t)(sd.n + 1));
    t->own_off = malloc(sizeof *t->own_off * (size_t)(t->world + 1));
    t->owned = calloc((size_t)(sd.n ? sd.n : 1), sizeof *t->owned);
    if (!t->par || !t->par_off || !t->own_off || !t->owned)
        return oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory");
    int64_t P = 0;
    for (int64_t i = 0; i < sd.n; i++) {
        oj_tensor *p = sd.tensors[i];
        if (!oj_requires_grad(p))
            continue;
        if (t->n_par && oj_tensor_dtype(p) != oj_tensor_dtype(t->par[0]))
            return oj_error_set(err, OJ_ERR_DTYPE,
                                "data parallel: parameter %s is %s, the others %s: the flat "
                                "gradient has one dtype",
                                sd.names[i], oj_dtype_name(oj_tensor_dtype(p)),
                                oj_dtype_name(oj_tensor_dtype(t->par[0])));
        t->par_off[t->n_par] = P;
        t->par[t->n_par++] = p;
        P += oj_numel(p);
    }
    t->par_off[t->n_par] = P;
    /* ZeRO-1 runs: parameter i belongs to the rank whose 1/W of the
     * elements holds its first element */
    int q = 0;
    t->own_off[0] = 0;
    for (int64_t i = 0; i < t->n_par; i++) {
        int owner = P ? (int)((t->par_off[i] * t->world) / P) : 0;
        while (q < owner)
            t->own_off[++q] = t->par_off[i];
        t->owned[i] = !c->zero || !t->distributed || owner == t->rank;
    }
    while (q < t->world)
        t->own_off[++q] = P;
    for (int r = 0; c->zero && t->distributed && r < t->world; r++)
        if (t->own_off[r + 1] == t->own_off[r]) /* its optimizer would have nothing to step */
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "ZeRO-1: the model's %lld trainable tensors leave rank %d of %d "
                                "without one (ZeRO-1 shards whole tensors): use fewer ranks or "
                                "zero=0",
                                (long long)t->n_par, r, t->world);
    /* buckets of at most dist_bucket_bytes of gradient (at least one
     * element per rank), each cut into world_size sub-shards */
    int64_t es = t->n_par ? (int64_t)oj_dtype_size(oj_tensor_dtype(t->par[0])) : 4;
    int64_t cap = c->dist_bucket_bytes / es;
    int64_t per = (P < cap ? P : cap);
    t->shard = (per + t->world - 1) / t->world;
    if (t->shard < 1)
        t->shard = 1;
    t->n_buckets = (P + t->shard * t->world - 1) / (t->shard * t->world);
    if (t->n_buckets < 1)
        t->n_buckets = 1;
    /* the norm's order: the whole optimizer's (its groups in turn, each in
     * state_dict order), so that the clip has the bits of
     * oj_optim_clip_grad_norm with or without ZeRO-1 */
    t->norm_order = malloc(sizeof *t->norm_order * (size_t)(t->n_par ? t->n_par : 1));
    if (!t->norm_order)
        return oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory");
    int64_t m = 0;
    for (int cls = 0; cls < 3; cls++)
        for (int64_t i = 0; i < sd.n; i++) {
            oj_tensor *p = sd.tensors[i];
            if (!oj_requires_grad(p))
                continue;
            int k = oj_rank(p) >= 2 ? 1 : 2;
            if (c->optimizer == OJ_TRAIN_MUON && oj_muon_eligible(sd.names[i], p, NULL))
                k = 0;
            if (c->optimizer == OJ_TRAIN_ADAMW)
                k = k == 1 ? 0 : 1;
            if (k == cls)
                t->norm_order[m++] = p;
        }
    return OJ_OK;
}

double oj__train_clip(oj_trainer *t) {
    bool shard = t->distributed && t->cfg.zero;
    double norm;
    if (t->cfg.grad_clip > 0 && !shard) /* the optimizer holds all: its clip keeps the norms */
        norm = oj__optim_clip_grad_norm_then(t->optim, t->cfg.grad_clip, NULL, NULL);
    else if (t->cfg.grad_clip > 0) /* the same order, without the shard's cache */
        norm = oj_clip_grad_norm(t->n_par, t->norm_order, t->cfg.grad_clip);
    else
        norm = oj_grad_norm(t->n_par, t->norm_order);
    if (!isfinite(norm) && shard) {
        /* a shard's own gradients may be finite: make every rank's
         * optimizer see the non-finite norm and skip, as one process would */
        for (int64_t i = 0; i < t->n_par; i++)
            if (t->owned[i] && t->par[i]->grad) {
                oj_fill_(t->par[i]->grad, NAN);
                break;
            }
    }
    return norm;
}

/* A view of flat elements off .. off + n shaped like p, detached from the
 * scopes (a gradient the parameter will own). */
static oj_tensor *flat_view(oj_tensor *flat, int64_t off, oj_tensor *p) {
    oj_tensor *v = oj_view(oj_narrow(flat, 0, off, oj_numel(p)), oj_rank(p), oj_shape(p));
    if (v)
        oj__scope_detach(v); /* the scope's reference becomes the parameter's */
    return v;
}

oj_status oj__train_dist_start(oj_trainer *t, oj_status st, oj_error *err) {
    oj_dist *d = t->opts.dist;
    if (!oj_dist_active(d))
        return st;
    /* a group without MPI exchanges its records through NCCL: bound
     * first (a rank that could not make its engine leaves the others to
     * time out in the rendezvous or NCCL's init, which name the wait) */
    bool bound = false;
    if (!oj_dist_mpi(d) && t->eng) {
        oj_status bs = oj_dist_bind(d, t->eng, st ? NULL : err);
        if (bs)
            return st ? st : bs;
        bound = true;
    }
    /* [status, rank 0's resumed checkpoint in out_dir, message] */
    struct {
        int32_t status;
        int64_t ckpt_in_out;
        char msg[240];
    } mine, *all = calloc((size_t)t->world, sizeof *all);
    if (!all)
        return st ? st : oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory");
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)st;
    mine.ckpt_in_out = t->ckpt_in_out;
    snprintf(mine.msg, sizeof mine.msg, "%.200s", st && err ? err->message : "");
    oj_error e2 = {0};
    oj_status xs = oj_dist_exchange(d, &mine, sizeof mine, all, "the start-up check", &e2);
    if (!st && xs)
        st = oj_error_set(err, xs, "%s", e2.message);
    for (int q = 0; !st && q < t->world; q++)
        if (all[q].status)
            st = oj_error_set(err, (oj_status)all[q].status, "rank %d could not start: %s", q,
                              all[q].msg);
    if (!st)
        t->ckpt_in_out = all[0].ckpt_in_out; /* the same checkpoint decisions on every rank */
    free(all);
    if (st)
        return st;
    st = bound ? OJ_OK : oj_dist_bind(d, t->eng, err);
    if (st)
        return st;
    oj_dtype dt = t->n_par ? oj_tensor_dtype(t->par[0]) : OJ_F32;
    /* the all-reduce path where its sum is allowed to depend on the world
     * size (FAST), or cannot (one rank), and the transport sums the dtype */
    t->allreduce = !t->cfg.zero &&
                   (t->world == 1 || t->cfg.numerics != OJ_NUMERICS_EXACT) &&
                   (!strcmp(oj_dist_transport(d), "nccl") || dt == OJ_F32 || dt == OJ_F64);
    if (t->allreduce) {
        int64_t P = t->par_off[t->n_par], n = P ? P : 1;
        t->flat = oj_empty(t->eng, 1, &n, dt);
        t->views = calloc((size_t)(t->n_par ? t->n_par : 1), sizeof *t->views);
        if (!t->flat || !t->views)
            return t->flat ? oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory")
                           : eng_fail(t, err, "the gradient arena");
        /* buckets of whole parameters, at most cap elements (or one) */
        int64_t es = (int64_t)oj_dtype_size(dt);
        int64_t cap = t->cfg.dist_bucket_bytes / es > 0 ? t->cfg.dist_bucket_bytes / es : 1;
        t->bk_first = malloc(sizeof *t->bk_first * (size_t)(t->n_par + 1));
        t->bk_of = malloc(sizeof *t->bk_of * (size_t)(t->n_par ? t->n_par : 1));
        t->bk_pending = calloc((size_t)(t->n_par ? t->n_par : 1), sizeof *t->bk_pending);
        if (!t->bk_first || !t->bk_of || !t->bk_pending)
            return oj_error_set(err, OJ_ERR_CAPACITY, "trainer: out of memory");
        t->n_bk = 0;
        for (int64_t i = 0; i < t->n_par; i++) {
            if (i == 0 || t->par_off[i + 1] - t->par_off[t->bk_first[t->n_bk - 1]] > cap)
                t->bk_first[t->n_bk++] = i;
            t->bk_of[i] = t->n_bk - 1;
        }
        t->bk_first[t->n_bk] = t->n_par;
        /* (through MPI, whose all-reduce is complete on return, the same
         * order of work, without the overlap) */
        t->overlap = !t->cfg.cuda_graph;
        oj_scope_begin(t->eng); /* the narrowed pieces; each view is detached */
        for (int64_t i = 0; i < t->n_par; i++)
            if (!(t->views[i] = flat_view(t->flat, t->par_off[i], t->par[i])))
                break;
        oj_scope_end(t->eng);
        if (oj_last_status(t->eng))
            return eng_fail(t, err, "the gradient arena");
    } else {
        int64_t e = t->shard * t->world, n = e * t->n_buckets, a = t->shard * t->n_buckets;
        t->flat = oj_zeros(t->eng, 1, &n, dt); /* the padding stays 0 */
        t->recv = oj_empty(t->eng, 1, &e, dt);
        t->acc = oj_empty(t->eng, 1, &a, dt);
        if (!t->flat || !t->recv || !t->acc)
            return eng_fail(t, err, "data parallel buffers");
    }
    oj__train_say(t, "data parallel: %d ranks (%s), %lld micro-batch(es) per rank per step, "
                     "ZeRO-1 %s, gradients %s, timeout %g s",
                  t->world, oj_dist_transport(d), (long long)t->accum,
                  t->cfg.zero ? "on (optimizer state sharded)" : "off",
                  t->allreduce ? "summed in place by all-reduce"
                               : "summed in rank order (shards exchanged)",
                  t->cfg.dist_timeout);
    return OJ_OK;
}

void oj__train_grads_unhook(oj_trainer *t) {
    if (t->eng && t->eng->leaf_grad_ready_ctx == t) {
        t->eng->leaf_grad_ready = NULL;
        t->eng->leaf_grad_ready_ctx = NULL;
    }
}

void oj__train_dist_free(oj_trainer *t) {
    oj__train_grads_unhook(t);
    free(t->bk_first);
    free(t->bk_of);
    free(t->bk_pending);
    if (t->views)
        for (int64_t i = 0; i < t->n_par; i++)
            oj_release(t->views[i]);
    free(t->views);
    if (t->acc1)
        for (int64_t i = 0; i < t->n_par; i++)
            oj_release(t->acc1[i]);
    free(t->acc1);
    oj_release(t->flat);
    oj_release(t->recv);
    oj_release(t->acc);
    free(t->par);
    free(t->par_off);
    free(t->own_off);
    free(t->owned);
    free(t->norm_order);
}

/* Queue the all-reduce of every bucket from next_bk down whose
 * gradients are final; the first error is kept in bk_status. */
static void launch_ready(oj_trainer *t) {
    oj_scope_begin(t->eng);
    while (t->next_bk >= 0 && t->bk_pending[t->next_bk] == 0 && !t->bk_status) {
        int64_t b = t->next_bk--;
        int64_t lo = t->par_off[t->bk_first[b]], hi = t->par_off[t->bk_first[b + 1]];
        oj_tensor *v = hi > lo ? oj_narrow(t->flat, 0, lo, hi - lo) : NULL;
        oj_error e = {0};
        if (hi > lo && !v) {
            t->bk_status = oj_last_status(t->eng);
            snprintf(t->bk_msg, sizeof t->bk_msg, "gradient bucket: %.500s", oj_last_error(t->eng));
        } else if (v && (t->bk_status = oj_dist_allreduce_sum(t->opts.dist, v, &e))) {
            snprintf(t->bk_msg, sizeof t->bk_msg, "%.500s", e.message);
        }
    }
    oj_scope_end(t->eng);
}

/* backward's leaf hook (the last micro-batch, overlap on): a parameter's
 * gradient is final; its bucket may be ready. */
static void on_grad_ready(void *ctx, oj_tensor *leaf) {
    oj_trainer *t = ctx;
    for (int64_t i = 0; i < t->n_par; i++)
        if (t->par[i] == leaf) {
            if (--t->bk_pending[t->bk_of[i]] == 0)
                launch_ready(t);
            return;
        }
}

oj_status oj__train_grads_attach(oj_trainer *t, int64_t k, oj_error *err) {
    bool whole = k > 0 && t->cfg.numerics == OJ_NUMERICS_EXACT;
    oj__train_grads_unhook(t); /* a hook left by a failed step fires on no other backward */
    if (k == 0) { /* the step's buckets: none queued */
        t->next_bk = t->n_bk - 1;
        t->bk_status = OJ_OK;
        for (int64_t b = 0; b < t->n_bk; b++)
            t->bk_pending[b] = (int32_t)(t->bk_first[b + 1] - t->bk_first[b]);
    }
    if (t->graph.graph)
        return OJ_OK; /* the captured backward rewrites the views */
    /* the last micro-batch's backward queues each bucket when it is final
     * (EXACT with several micro-batches adds the last one in after) */
    if (t->overlap && k == t->accum - 1 && !whole) {
        t->eng->leaf_grad_ready = on_grad_ready;
        t->eng->leaf_grad_ready_ctx = t;
    }
    if (k > 0 && !whole)
        return OJ_OK; /* FAST: backward keeps adding into the arena */
    for (int64_t i = 0; i < t->n_par; i++) {
        oj_tensor *p = t->par[i];
        oj_zero_grad(p);
        if (!whole) { /* the micro-batch's first gradient is copied in */
            p->grad = oj_retain(t->views[i]);
            p->grad_fresh = true;
        }
    }
    return oj_last_status(t->eng) ? eng_fail(t, err, "gradient views") : OJ_OK;
}

/* The all-reduce path after micro-batch k's backward: EXACT, k > 0: the
 * micro-batch's whole gradient added into the arena (the one-process
 * order); every arena part no gradient reached is zeroed. */
static oj_status allreduce_micro(oj_trainer *t, int64_t k, oj_error *err) {
    bool whole = k > 0 && t->cfg.numerics == OJ_NUMERICS_EXACT;
    oj__train_grads_unhook(t);
    for (int64_t i = 0; i < t->n_par; i++) {
        oj_tensor *p = t->par[i], *v = t->views[i];
        if (whole) {
            if (p->grad)
                oj_add_(v, p->grad);
            oj_zero_grad(p);
            p->grad = oj_retain(v);
        } else if (p->grad_fresh) { /* unused by this micro-batch */
            oj_fill_(v, 0);
            p->grad_fresh = false;
        }
    }
    return oj_last_status(t->eng) ? eng_fail(t, err, "accumulating gradients") : OJ_OK;
}

oj_status oj__train_grads_micro(oj_trainer *t, int64_t k, oj_error *err) {
    oj_engine *eng = t->eng;
    if (t->allreduce)
        return allreduce_micro(t, k, err);
    if (!t->distributed) { /* one process: acc1[i] = g_0, then acc1[i] + g_k */
        if (!t->acc1 && !(t->acc1 = calloc((size_t)(t->n_par ? t->n_par : 1), sizeof *t->acc1)))
            return oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
        for (int64_t i = 0; i < t->n_par; i++) {
            oj_tensor *p = t->par[i], *g = p->grad;
            if (k == 0) {
                if (g == NULL) { /* unused by this micro-batch: zeros */
                    g = oj_zeros(eng, oj_rank(p), oj_shape(p), oj_tensor_dtype(p));
                    if (g)
                        oj__scope_detach(g);
                } else {
                    p->grad = NULL; /* the reference moves to acc1 */
                }
                t->acc1[i] = g;
            } else if (g) {
                oj_add_(t->acc1[i], g);
                oj_zero_grad(p);
            }
        }
        return oj_last_status(eng) ? eng_fail(t, err, "accumulating gradients") : OJ_OK;
    }
    /* data parallel: pack, drop, exchange shards, sum in rank order */
    for (int64_t i = 0; i < t->n_par; i++) {
        oj_tensor *p = t->par[i], *g = p->grad;
        int64_t n = oj_numel(p);
        oj_tensor *dst = oj_narrow(t->flat, 0, t->par_off[i], n);
        if (g)
            oj_copy_(dst, oj_view(g, 1, &n));
        else
            oj_fill_(dst, 0);
        oj_zero_grad(p);
    }
    if (oj_last_status(eng))
        return eng_fail(t, err, "packing gradients");
    /* every rank's position first: one message per peer, so that a rank
     * that died or hangs is named by the others (the alltoall can only say
     * that it waited), and ranks out of step are caught */
    int64_t pos[2] = {t->step + 1, k}, *all = malloc(sizeof pos * (size_t)t->world);
    if (!all)
        return oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
    char what[96];
    snprintf(what, sizeof what, "step %lld micro-batch %lld", (long long)pos[0], (long long)k);
    oj_status st = oj_dist_exchange(t->opts.dist, pos, sizeof pos, all, what, err);
    for (int q = 0; !st && q < t->world; q++)
        if (all[2 * q] != pos[0] || all[2 * q + 1] != pos[1])
            st = oj_error_set(err, OJ_ERR_STATE,
                              "data parallel: rank %d is at step %lld micro-batch %lld, rank %d "
                              "at step %lld micro-batch %lld: the ranks are out of step",
                              q, (long long)all[2 * q], (long long)all[2 * q + 1], t->rank,
                              (long long)pos[0], (long long)k);
    free(all);
    const int64_t S = t->shard, E = S * t->world;
    for (int64_t b = 0; !st && b < t->n_buckets; b++) {
        /* bucket b: sub-shard q of every rank's to rank q */
        st = oj_dist_alltoall(t->opts.dist, oj_narrow(t->flat, 0, b * E, E), t->recv, err);
        oj_tensor *acc = oj_narrow(t->acc, 0, b * S, S);
        for (int q = 0; !st && q < t->world; q++) {
            oj_tensor *blk = oj_narrow(t->recv, 0, q * S, S); /* rank q's micro-batch k */
            if (k == 0 && q == 0)
                oj_copy_(acc, blk);
            else
                oj_add_(acc, blk);
        }
        if (!st && oj_last_status(eng))
            st = eng_fail(t, err, "summing gradient shards");
    }
    return st;
}

oj_status oj__train_grads_finish(oj_trainer *t, oj_error *err) {
    if (t->allreduce) {
        /* the buckets backward did not queue (all without overlap), last
         * first, summed in place without a host wait (NCCL: the engine's
         * stream waits on the device, the watchdog bounds them) */
        for (int64_t b = 0; b < t->n_bk; b++)
            t->bk_pending[b] = 0;
        launch_ready(t);
        oj_status st = t->bk_status;
        if (st)
            return oj_error_set(err, st, "%s", t->bk_msg);
        char what[96];
        snprintf(what, sizeof what, "the step %lld gradient all-reduce", (long long)t->step + 1);
        st = oj_dist_join(t->opts.dist, err);
        if (!st)
            st = oj_dist_watch(t->opts.dist, what, err);
        return st;
    }
    if (!t->distributed) {
        for (int64_t i = 0; i < t->n_par; i++) {
            oj_tensor *p = t->par[i];
            oj_zero_grad(p);
            p->grad = t->acc1[i];
            t->acc1[i] = NULL;
        }
        return OJ_OK;
    }
    const int64_t S = t->shard, E = S * t->world;
    oj_status st = OJ_OK;
    for (int64_t b = 0; !st && b < t->n_buckets; b++)
        st = oj_dist_allgather(t->opts.dist, oj_narrow(t->acc, 0, b * S, S),
                               oj_narrow(t->flat, 0, b * E, E), err);
    if (st)
        return st;
    for (int64_t i = 0; i < t->n_par; i++) {
        oj_tensor *p = t->par[i];
        oj_zero_grad(p);
        p->grad = flat_view(t->flat, t->par_off[i], p);
    }
    return oj_last_status(t->eng) ? eng_fail(t, err, "gradient views") : OJ_OK;
}

oj_status oj__train_dist_record(oj_trainer *t, const double *losses, double *loss_sum,
                                double flags[2], oj_error *err) {
    /* mine: [stop signal, time-limit stop, sched total, step, losses of
     * accum micro-batches (none when losses is NULL)] */
    const int64_t n = 4 + (losses ? t->accum : 0);
    double *mine = malloc(sizeof *mine * (size_t)n);
    double *all = malloc(sizeof *all * (size_t)(n * t->world));
    if (!mine || !all) {
        free(mine);
        free(all);
        return oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
    }
    memcpy(mine, flags, 2 * sizeof *flags);
    mine[2] = (double)t->sched_mine;
    mine[3] = (double)(t->step + 1);
    if (losses)
        memcpy(mine + 4, losses, sizeof *losses * (size_t)t->accum);
    char what[96];
    snprintf(what, sizeof what, "the step %lld record exchange", (long long)t->step + 1);
    oj_status st = oj_dist_exchange(t->opts.dist, mine, sizeof *mine * (size_t)n, all, what, err);
    for (int q = 0; !st && q < t->world; q++) /* the ranks at one step */
        if (all[q * n + 3] != mine[3])
            st = oj_error_set(err, OJ_ERR_STATE,
                              "data parallel: rank %d is at step %.0f, rank %d at step %.0f: the "
                              "ranks are out of step",
                              q, all[q * n + 3], t->rank, mine[3]);
    if (!st) {
        double sum = 0;
        /* micro-batch j = k * world + q: the order one process sums them in */
        for (int64_t k = 0; losses && k < t->accum; k++)
            for (int q = 0; q < t->world; q++)
                sum += all[q * n + 4 + k];
        if (loss_sum)
            *loss_sum = sum;
        flags[0] = 0;
        for (int q = 0; q < t->world; q++)
            flags[0] = flags[0] || all[q * n] != 0; /* a signal on any rank */
        flags[1] = all[1];                          /* rank 0's clock decides */
        t->sched_mine = (int64_t)all[2];
    }
    free(mine);
    free(all);
    return st;
}

oj_status oj__train_zero_after_step(oj_trainer *t, bool skipped, oj_error *err) {
    if (!t->distributed || !t->cfg.zero)
        return OJ_OK;
    /* every rank must have applied or skipped alike */
    char mine = skipped, *all = malloc((size_t)t->world);
    if (!all)
        return oj_error_set(err, OJ_ERR_CAPACITY, "step: out of host memory");
    oj_status st = oj_dist_exchange(t->opts.dist, &mine, 1, all, "the ZeRO-1 step outcome", err);
    for (int q = 0; !st && q < t->world; q++)
        if (all[q] != mine)
            st = oj_error_set(err, OJ_ERR_NUMERIC,
                              "ZeRO-1: rank %d %s step %lld while rank %d %s it (a value of "
                              "one shard's update was non-finite): the optimizer states "
                              "disagree; resume from the last checkpoint",
                              q, all[q] ? "skipped" : "applied", (long long)t->step + 1, t->rank,
                              mine ? "skipped" : "applied");
    free(all);
    if (st || skipped)
        return st;
    /* the parameters from their owners: pack mine, gather, unpack the rest */
    oj_engine *eng = t->eng;
    oj_tensor *flat = t->flat;
    bool grad = oj_set_grad_enabled(eng, false); /* parameter data, not recorded */
    for (int64_t i = 0; i < t->n_par; i++)
        if (t->owned[i]) {
            int64_t n = oj_numel(t->par[i]);
            oj_copy_(oj_narrow(flat, 0, t->par_off[i], n), oj_view(t->par[i], 1, &n));
        }
    /* allgatherv over the first P elements of flat (its padding is not sent) */
    oj_tensor *head = oj_last_status(eng) ? NULL : oj_narrow(flat, 0, 0, t->par_off[t->n_par]);
    if (!head) {
        oj_set_grad_enabled(eng, grad);
        return eng_fail(t, err, "packing parameters");
    }
    st = oj_dist_allgatherv(t->opts.dist, head, t->own_off, err);
    if (st) {
        oj_set_grad_enabled(eng, grad);
        return st;
    }
    for (int64_t i = 0; i < t->n_par; i++)
        if (!t->owned[i]) {
            int64_t n = oj_numel(t->par[i]);
            oj_copy_(oj_view(t->par[i], 1, &n), oj_narrow(flat, 0, t->par_off[i], n));
        }
    oj_set_grad_enabled(eng, grad);
    return oj_last_status(eng) ? eng_fail(t, err, "unpacking parameters") : OJ_OK;
}

/* ---------------------------------------------------------------- ZeRO-1 state */

/* Copy the optimizer state tensors of `from` into the same-named ones of
 * `to` (every name of `to` must be in `from` unless `partial`), then take
 * the counts back. */
static oj_status copy_state(oj_trainer *t, oj_optim *to, oj_optim *from, bool partial,
                            oj_error *err) {
    oj_named_tensors a, b;
    if (oj_optim_state(to, &a))
        return eng_fail(t, err, "optimizer state");
    /* a stays valid: b is another optimizer's */
    if (oj_optim_state(from, &b))
        return eng_fail(t, err, "optimizer state");
    for (int64_t i = 0; i < a.n; i++) {
        int64_t j = 0;
        while (j < b.n && strcmp(a.names[i], b.names[j]))
            j++;
        if (j == b.n && partial)
            continue;
        if (j == b.n)
            return oj_error_set(err, OJ_ERR_INTERNAL, "ZeRO-1: no optimizer state named %s",
                                a.names[i]);
        oj_copy_(a.tensors[i], b.tensors[j]);
    }
    if (oj_last_status(t->eng) || oj_optim_state_sync(to))
        return eng_fail(t, err, "optimizer state");
    return OJ_OK;
}

oj_status oj__train_zero_resume(oj_trainer *t, oj_error *err) {
    oj_optim *shard = t->optim, *full = NULL;
    oj_status st = oj__train_make_optim(t, true, &full, err);
    if (st)
        return st;
    t->optim = full; /* the checkpoint holds the whole state */
    st = oj__train_resume(t, err);
    t->optim = shard;
    if (!st)
        st = copy_state(t, shard, full, false, err);
    oj_optim_free(full);
    return st;
}

/* Append the records "u32 name length, name, u64 bytes, bytes" of o's
 * state to a malloc'd buffer. */
static oj_status pack_state(oj_trainer *t, oj_optim *o, char **buf, size_t *len, oj_error *err) {
    oj_named_tensors s;
    if (oj_optim_state(o, &s))
        return eng_fail(t, err, "optimizer state");
    size_t n = 0;
    for (int64_t i = 0; i < s.n; i++)
        n += 4 + strlen(s.names[i]) + 8 +
             (size_t)oj_numel(s.tensors[i]) * oj_dtype_size(oj_tensor_dtype(s.tensors[i]));
    char *b = malloc(n ? n : 1), *p = b;
    if (!b)
        return oj_error_set(err, OJ_ERR_CAPACITY, "ZeRO-1: out of host memory (%zu bytes)", n);
    for (int64_t i = 0; i < s.n; i++) {
        uint32_t nl = (uint32_t)strlen(s.names[i]);
        uint64_t nb = (uint64_t)oj_numel(s.tensors[i]) *
                      oj_dtype_size(oj_tensor_dtype(s.tensors[i]));
        memcpy(p, &nl, 4);
        memcpy(p + 4, s.names[i], nl);
        memcpy(p + 4 + nl, &nb, 8);
        p += 12 + nl;
        if (oj_to_host(s.tensors[i], p, nb)) {
            free(b);
            return eng_fail(t, err, "optimizer state");
        }
        p += nb;
    }
    *buf = b;
    *len = n;
    return OJ_OK;
}

/* Load records (pack_state) into the same-named state tensors of o. */
static oj_status unpack_state(oj_trainer *t, oj_optim *o, const char *b, size_t len, int from,
                              oj_error *err) {
    oj_named_tensors s;
    if (oj_optim_state(o, &s))
        return eng_fail(t, err, "optimizer state");
    size_t at = 0;
    while (at < len) {
        uint32_t nl;
        uint64_t nb;
        if (len - at < 12)
            break;
        memcpy(&nl, b + at, 4);
        if (len - at - 12 < nl)
            break;
        memcpy(&nb, b + at + 4 + nl, 8);
        if (len - at - 12 - nl < nb)
            break;
        int64_t j = 0;
        while (j < s.n && (strlen(s.names[j]) != nl || memcmp(s.names[j], b + at + 4, nl)))
            j++;
        if (j == s.n)
            return oj_error_set(err, OJ_ERR_INTERNAL,
                                "ZeRO-1: rank %d sent optimizer state %.*s, which rank 0 does "
                                "not have",
                                from, (int)nl, b + at + 4);
        if (oj_copy_from_host(s.tensors[j], b + at + 12 + nl, nb))
            return eng_fail(t, err, "optimizer state");
        at += 12 + nl + nb;
    }
    if (at != len)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "ZeRO-1: the optimizer state from rank %d is truncated at byte %zu "
                            "of %zu",
                            from, at, len);
    return OJ_OK;
}

oj_status oj__train_zero_gather(oj_trainer *t, oj_optim **full, oj_error *err) {
    *full = NULL;
    oj_status st = OJ_OK;
    if (t->rank != 0) {
        char *b = NULL;
        size_t n = 0;
        st = pack_state(t, t->optim, &b, &n, err);
        if (st) { /* rank 0 waits for a record: end the job instead of hanging it */
            fprintf(stderr, "ojas: rank %d: %s\n", t->rank, err ? err->message : "");
            oj_dist_abort(t->opts.dist, 1);
        }
        st = oj_dist_send(t->opts.dist, 0, b, n, err);
        free(b);
        return st;
    }
    oj_optim *f = NULL;
    st = oj__train_make_optim(t, true, &f, err);
    if (!st)
        st = copy_state(t, f, t->optim, true, err); /* rank 0's run and the counters */
    for (int q = 1; !st && q < t->world; q++) {
        void *b = NULL;
        size_t n = 0;
        st = oj_dist_recv(t->opts.dist, q, &b, &n, err);
        if (!st)
            st = unpack_state(t, f, b, n, q, err);
        free(b);
    }
    if (!st && oj_optim_state_sync(f))
        st = eng_fail(t, err, "optimizer state");
    if (st) {
        oj_optim_free(f);
        return st;
    }
    *full = f;
    return OJ_OK;
}

oj_status oj__train_dist_checkpoint(oj_trainer *t, oj_error *err) {
    oj_optim *full = NULL, *mine = t->optim;
    oj_status st = OJ_OK;
    if (t->cfg.zero)
        st = oj__train_zero_gather(t, &full, err);
    if (!st && t->rank == 0) {
        if (full)
            t->optim = full; /* written as one process writes it */
        st = oj__train_checkpoint(t, err);
        t->optim = mine;
    }
    oj_optim_free(full);
    /* every rank learns whether rank 0 wrote it */
    struct {
        int32_t status;
        char msg[240];
    } rec, *all = calloc((size_t)t->world, sizeof *all);
    if (!all)
        return st ? st : oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint: out of memory");
    memset(&rec, 0, sizeof rec);
    rec.status = (int32_t)st;
    snprintf(rec.msg, sizeof rec.msg, "%.200s", st && err ? err->message : "");
    oj_error e2 = {0};
    oj_status xs = oj_dist_exchange(t->opts.dist, &rec, sizeof rec, all, "the checkpoint", &e2);
    if (!st && xs)
        st = oj_error_set(err, xs, "%s", e2.message);
    for (int q = 0; !st && q < t->world; q++)
        if (all[q].status)
            st = oj_error_set(err, (oj_status)all[q].status, "checkpoint: rank %d: %s", q,
                              all[q].msg);
    free(all);
    if (!st && t->rank != 0) /* where rank 0 wrote it */
        oj_checkpoint_path(t->out_dir, t->step, t->last_ckpt, sizeof t->last_ckpt);
    return st;
}
