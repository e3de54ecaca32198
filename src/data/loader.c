/* The batch loader: windows of T + 1 tokens from mmap'd shards, placed by
 * (epoch, step, rank) and the keyed permutation, optionally built one batch
 * ahead on a background thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/data.h"

struct oj_loader {
    oj_loader_config cfg;
    char **paths;
    oj_shard **shards;
    int64_t *wstart; /* [n_paths + 1] first global window of each shard */
    int64_t W, steps;
    uint64_t epoch, step; /* position of the next batch */
    size_t esize;         /* bytes per element of the output dtype */
    int32_t *win;         /* T + 1 scratch for the caller's thread */
    /* prefetch */
    bool threaded;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, want_valid, ready;
    uint64_t want_epoch, want_step, gen;
    void *pre_in, *pre_tg;
    int32_t *pre_win;
    oj_status pre_st;
    oj_error pre_err;
};

oj_loader_config oj_loader_config_default(void) {
    return (oj_loader_config){.paths = NULL, .n_paths = 0, .B = 0, .T = 0, .rank = 0,
                              .world_size = 1, .shuffle = false, .seed = 0, .dtype = OJ_I64,
                              .prefetch = true, .vocab_size = 0};
}

/* Build the batch at (epoch, step) into in/tg using scratch win. */
static oj_status fill(const oj_loader *L, uint64_t seed, uint64_t epoch, uint64_t step, void *in, void *tg,
                      int32_t *win, oj_error *err) {
    const int64_t B = L->cfg.B, T = L->cfg.T;
    for (int64_t b = 0; b < B; b++) {
        int64_t p = ((int64_t)step * L->cfg.world_size + L->cfg.rank) * B + b;
        int64_t w = L->cfg.shuffle ? oj_loader_permute(seed, epoch, L->W, p) : p;
        int lo = 0, hi = L->cfg.n_paths - 1; /* shard s with wstart[s] <= w < wstart[s+1] */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (L->wstart[mid] <= w)
                lo = mid;
            else
                hi = mid - 1;
        }
        int64_t k = w - L->wstart[lo];
        oj_status st = oj_shard_read(L->shards[lo], k * T, T + 1, win, err);
        if (st)
            return st;
        for (int64_t i = 0; i <= T; i++)
            if (win[i] < 0 || (L->cfg.vocab_size > 0 && win[i] >= L->cfg.vocab_size))
                return oj_error_set(err, OJ_ERR_CORRUPT,
                                    "loader: shard %s token %lld is %d, outside the vocabulary "
                                    "of %lld",
                                    L->paths[lo], (long long)(k * T + i), (int)win[i],
                                    (long long)L->cfg.vocab_size);
        if (L->cfg.dtype == OJ_I64) {
            int64_t *a = (int64_t *)in + b * T, *c = (int64_t *)tg + b * T;
            for (int64_t i = 0; i < T; i++) {
                a[i] = win[i];
                c[i] = win[i + 1];
            }
        } else {
            int32_t *a = (int32_t *)in + b * T, *c = (int32_t *)tg + b * T;
            memcpy(a, win, (size_t)T * sizeof *a);
            memcpy(c, win + 1, (size_t)T * sizeof *c);
        }
    }
    return OJ_OK;
}

static void *prefetch_main(void *arg) {
    oj_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->stop && (L->ready || !L->want_valid))
            pthread_cond_wait(&L->cv, &L->mu);
        if (L->stop)
            break;
        uint64_t e = L->want_epoch, s = L->want_step, g = L->gen, seed = L->cfg.seed;
        pthread_mutex_unlock(&L->mu);
        oj_error err = {0};
        oj_status st = fill(L, seed, e, s, L->pre_in, L->pre_tg, L->pre_win, &err);
        pthread_mutex_lock(&L->mu);
        if (g == L->gen) {
            L->pre_st = st;
            L->pre_err = err;
            L->ready = true;
            pthread_cond_broadcast(&L->cv);
        }
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

void oj_loader_free(oj_loader *L) {
    if (!L)
        return;
    if (L->threaded) {
        pthread_mutex_lock(&L->mu);
        L->stop = true;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
        pthread_join(L->th, NULL);
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->cv);
    }
    for (int i = 0; i < L->cfg.n_paths; i++) {
        if (L->shards)
            oj_shard_close(L->shards[i]);
        if (L->paths)
            free(L->paths[i]);
    }
    free(L->shards);
    free(L->paths);
    free(L->wstart);
    free(L->win);
    free(L->pre_in);
    free(L->pre_tg);
    free(L->pre_win);
    free(L);
}

oj_status oj_loader_open(const oj_loader_config *cfg, oj_loader **out, oj_error *err) {
    if (!cfg || !out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "loader_open: NULL argument");
    *out = NULL;
    if (cfg->n_paths < 1 || !cfg->paths || cfg->B < 1 || cfg->T < 1 || cfg->world_size < 1 ||
        cfg->rank < 0 || cfg->rank >= cfg->world_size ||
        (cfg->dtype != OJ_I64 && cfg->dtype != OJ_I32) || cfg->vocab_size < 0 ||
        cfg->T > INT32_MAX - 1 || cfg->B > INT64_MAX / cfg->T / 8)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "loader_open: need >= 1 shard, B %lld >= 1, T %lld >= 1, 0 <= rank %d "
                            "< world_size %d, dtype i64 or i32 (got %s)",
                            (long long)cfg->B, (long long)cfg->T, cfg->rank, cfg->world_size,
                            oj_dtype_name(cfg->dtype));
    oj_loader *L = calloc(1, sizeof *L);
    if (!L)
        return oj_error_set(err, OJ_ERR_CAPACITY, "loader_open: out of memory");
    L->cfg = *cfg;
    L->cfg.paths = NULL;
    int np = cfg->n_paths;
    L->paths = calloc((size_t)np, sizeof *L->paths);
    L->shards = calloc((size_t)np, sizeof *L->shards);
    L->wstart = calloc((size_t)np + 1, sizeof *L->wstart);
    L->esize = oj_dtype_size(cfg->dtype);
    size_t bt = (size_t)(cfg->B * cfg->T);
    L->win = malloc((size_t)(cfg->T + 1) * sizeof *L->win);
    oj_status st = OJ_OK;
    if (!L->paths || !L->shards || !L->wstart || !L->win) {
        st = oj_error_set(err, OJ_ERR_CAPACITY, "loader_open: out of memory");
        goto fail;
    }
    for (int i = 0; i < np; i++) {
        if (!cfg->paths[i] || !(L->paths[i] = strdup(cfg->paths[i]))) {
            st = oj_error_set(err, cfg->paths[i] ? OJ_ERR_CAPACITY : OJ_ERR_INVALID_ARGUMENT,
                              "loader_open: path %d is NULL or out of memory", i);
            goto fail;
        }
        if ((st = oj_shard_open(L->paths[i], &L->shards[i], err)) ||
            (st = oj_shard_check_vocab(L->shards[i],
                                       cfg->vocab_size > 0 ? cfg->vocab_size : (int64_t)1 << 31,
                                       err)))
            goto fail;
        int64_t n = oj_shard_len(L->shards[i]);
        L->wstart[i + 1] = L->wstart[i] + (n > 0 ? (n - 1) / cfg->T : 0);
    }
    L->W = L->wstart[np];
    L->steps = L->W / (cfg->B * cfg->world_size);
    if (L->steps < 1) {
        st = oj_error_set(err, OJ_ERR_SHAPE,
                          "loader_open: the shards hold %lld windows of T+1 = %lld tokens, fewer "
                          "than B * world_size = %lld",
                          (long long)L->W, (long long)cfg->T + 1,
                          (long long)(cfg->B * cfg->world_size));
        goto fail;
    }
    if (cfg->prefetch) {
        L->pre_in = malloc(bt * L->esize);
        L->pre_tg = malloc(bt * L->esize);
        L->pre_win = malloc((size_t)(cfg->T + 1) * sizeof *L->pre_win);
        if (!L->pre_in || !L->pre_tg || !L->pre_win) {
            st = oj_error_set(err, OJ_ERR_CAPACITY, "loader_open: out of memory");
            goto fail;
        }
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->cv, NULL);
        if (pthread_create(&L->th, NULL, prefetch_main, L) != 0) {
            pthread_mutex_destroy(&L->mu);
            pthread_cond_destroy(&L->cv);
            st = oj_error_set(err, OJ_ERR_CAPACITY, "loader_open: cannot start the prefetch thread");
            goto fail;
        }
        L->threaded = true;
    }
    *out = L;
    return OJ_OK;
fail:
    oj_loader_free(L);
    return st;
}

static void advance(oj_loader *L) {
    if (++L->step >= (uint64_t)L->steps) {
        L->step = 0;
        L->epoch++;
    }
}

/* Produce the batch at the current position into in/tg (host) or, when
 * eng is set, into two new tensors. */
static oj_status next_batch(oj_loader *L, void *in, void *tg, oj_engine *eng, oj_tensor **tin,
                            oj_tensor **ttg, oj_error *err) {
    const int64_t shape[2] = {L->cfg.B, L->cfg.T};
    size_t nbytes = (size_t)(L->cfg.B * L->cfg.T) * L->esize;
    oj_status st;
    const void *src_in, *src_tg;
    if (L->threaded) {
        pthread_mutex_lock(&L->mu);
        if (!L->want_valid || L->want_epoch != L->epoch || L->want_step != L->step) {
            L->want_valid = true;
            L->want_epoch = L->epoch;
            L->want_step = L->step;
            L->ready = false;
            L->gen++;
            pthread_cond_broadcast(&L->cv);
        }
        while (!L->ready)
            pthread_cond_wait(&L->cv, &L->mu);
        st = L->pre_st;
        if (st)
            oj_error_set(err, st, "%s", L->pre_err.message);
        src_in = L->pre_in;
        src_tg = L->pre_tg;
    } else {
        if (!in) {
            in = malloc(nbytes);
            tg = malloc(nbytes);
            if (!in || !tg) {
                free(in);
                free(tg);
                return oj_error_set(err, OJ_ERR_CAPACITY, "loader_next: out of memory");
            }
            st = fill(L, L->cfg.seed, L->epoch, L->step, in, tg, L->win, err);
            if (!st) {
                *tin = oj_from_host(eng, 2, shape, L->cfg.dtype, in, nbytes);
                *ttg = *tin ? oj_from_host(eng, 2, shape, L->cfg.dtype, tg, nbytes) : NULL;
                if (!*tin || !*ttg) {
                    oj_release(*tin);
                    *tin = *ttg = NULL;
                    st = oj_last_status(eng);
                }
            }
            free(in);
            free(tg);
            if (!st)
                advance(L);
            return st;
        }
        st = fill(L, L->cfg.seed, L->epoch, L->step, in, tg, L->win, err);
        if (!st)
            advance(L);
        return st;
    }
    /* threaded: copy out under the lock (the worker waits for !ready) */
    if (!st) {
        if (!in) { /* tensors wanted (oj_loader_next) */
            *tin = oj_from_host(eng, 2, shape, L->cfg.dtype, src_in, nbytes);
            *ttg = *tin ? oj_from_host(eng, 2, shape, L->cfg.dtype, src_tg, nbytes) : NULL;
            if (!*tin || !*ttg) {
                oj_release(*tin);
                *tin = *ttg = NULL;
                st = oj_last_status(eng);
            }
        } else {
            memcpy(in, src_in, nbytes);
            memcpy(tg, src_tg, nbytes);
        }
    }
    if (!st) {
        advance(L);
        L->want_epoch = L->epoch;
        L->want_step = L->step;
        L->ready = false;
        L->gen++;
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    return st;
}

oj_status oj_loader_next_host(oj_loader *L, void *inputs, void *targets, oj_error *err) {
    if (!L || !inputs || !targets)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "loader_next_host: NULL argument");
    return next_batch(L, inputs, targets, NULL, NULL, NULL, err);
}

oj_status oj_loader_next(oj_loader *L, oj_engine *eng, oj_tensor **inputs, oj_tensor **targets) {
    if (!eng)
        return OJ_ERR_INVALID_ARGUMENT;
    if (!L || !inputs || !targets)
        return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "loader_next: NULL argument");
    *inputs = *targets = NULL;
    oj_error err = {0};
    oj_status st = next_batch(L, NULL, NULL, eng, inputs, targets, &err);
    if (st && err.status)
        oj_set_error(eng, err.status, "%s", err.message);
    return st;
}

int64_t oj_loader_num_windows(const oj_loader *L) { return L ? L->W : 0; }
int64_t oj_loader_steps_per_epoch(const oj_loader *L) { return L ? L->steps : 0; }

void oj_loader_get_state(const oj_loader *L, oj_loader_state *st) {
    if (!L || !st)
        return;
    *st = (oj_loader_state){.seed = L->cfg.seed, .epoch = L->epoch, .step = L->step,
                            .n_windows = L->W, .B = L->cfg.B, .T = L->cfg.T,
                            .rank = L->cfg.rank, .world_size = L->cfg.world_size,
                            .shuffle = L->cfg.shuffle};
}

oj_status oj_loader_set_state(oj_loader *L, const oj_loader_state *st, oj_error *err) {
    if (!L || !st)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "loader_set_state: NULL argument");
    if (st->n_windows != L->W || st->B != L->cfg.B || st->T != L->cfg.T ||
        st->rank != L->cfg.rank || st->world_size != L->cfg.world_size ||
        st->shuffle != (int32_t)L->cfg.shuffle || st->step >= (uint64_t)L->steps)
        return oj_error_set(err, OJ_ERR_STATE,
                            "loader_set_state: saved for %lld windows, B %lld, T %lld, rank %d/%d, "
                            "shuffle %d, step %llu; this loader has %lld, %lld, %lld, %d/%d, %d, "
                            "%lld steps per epoch",
                            (long long)st->n_windows, (long long)st->B, (long long)st->T,
                            (int)st->rank, (int)st->world_size, (int)st->shuffle,
                            (unsigned long long)st->step, (long long)L->W, (long long)L->cfg.B,
                            (long long)L->cfg.T, L->cfg.rank, L->cfg.world_size,
                            (int)L->cfg.shuffle, (long long)L->steps);
    if (L->threaded)
        pthread_mutex_lock(&L->mu);
    L->cfg.seed = st->seed;
    L->epoch = st->epoch;
    L->step = st->step;
    if (L->threaded) {
        L->want_valid = false;
        L->ready = false;
        L->gen++;
        pthread_mutex_unlock(&L->mu);
    }
    return OJ_OK;
}
