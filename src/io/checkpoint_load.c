/* Checkpoint loading: read the four files, validate all of them (hashes,
 * JSON, safetensors structure, names/dtypes/shapes against the live
 * tensors), stage device copies, and only then write into the live
 * tensors, so a refused or failed load leaves them as they were. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "io/io_internal.h"

/* Expectations built from live tensors. */
typedef struct live {
    oj__expect ex;
    oj_dtype *dtypes;
    int *ranks;
    int64_t (*shapes)[OJ_MAX_RANK];
} live;

static void live_free(live *l) {
    free(l->dtypes);
    free(l->ranks);
    free(l->shapes);
    memset(l, 0, sizeof *l);
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static oj_status live_build(const oj_named_tensors *nt, const char *what, live *l, oj_error *err) {
    memset(l, 0, sizeof *l);
    int64_t n = nt->n;
    if (n < 0 || (n > 0 && (!nt->names || !nt->tensors)))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint load: %s list is malformed", what);
    size_t m = (size_t)(n ? n : 1);
    l->dtypes = malloc(m * sizeof *l->dtypes);
    l->ranks = malloc(m * sizeof *l->ranks);
    l->shapes = malloc(m * sizeof *l->shapes);
    const char **sorted = malloc(m * sizeof *sorted);
    oj_status rc = OJ_OK;
    if (!l->dtypes || !l->ranks || !l->shapes || !sorted)
        rc = oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint load: out of host memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        int rank = oj_rank(nt->tensors[i]);
        if (!nt->names[i] || rank < 0) {
            rc = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                              "checkpoint load: %s entry %" PRId64 " (%s) has no name or no live tensor",
                              what, i, nt->names[i] ? nt->names[i] : "NULL");
            break;
        }
        l->dtypes[i] = oj_tensor_dtype(nt->tensors[i]);
        l->ranks[i] = rank;
        memcpy(l->shapes[i], oj_shape(nt->tensors[i]), sizeof l->shapes[i]);
        sorted[i] = nt->names[i];
    }
    if (!rc) {
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_cstr);
        for (int64_t i = 1; i < n && !rc; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0)
                rc = oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint load: %s name %s twice",
                                  what, sorted[i]);
    }
    free(sorted);
    if (rc) {
        live_free(l);
        return rc;
    }
    l->ex.n = n;
    l->ex.names = nt->names;
    l->ex.dtypes = l->dtypes;
    l->ex.ranks = l->ranks;
    l->ex.shapes = (const int64_t(*)[OJ_MAX_RANK])l->shapes;
    return OJ_OK;
}

static bool direct(oj_tensor *t) {
    return oj_tensor_device(t).type == OJ_DEVICE_CPU && oj_is_contiguous(t);
}

/* Copy the file's bytes into the live tensors. Device (or strided)
 * tensors are staged first; if a staging copy cannot be made, nothing has
 * been written yet. */
static oj_status apply(const oj_named_tensors *nt, const oj_safetensors *st, oj_error *err) {
    int64_t n = nt->n;
    oj_tensor **staged = calloc((size_t)(n ? n : 1), sizeof *staged);
    if (!staged) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint load: out of host memory");
    oj_status rc = OJ_OK;
    for (int64_t i = 0; i < n && !rc; i++) {
        oj_tensor *t = nt->tensors[i];
        if (direct(t)) continue;
        size_t nbytes;
        const void *src = oj_safetensors_data(st, oj_safetensors_find(st, nt->names[i]), &nbytes);
        oj_engine *eng = oj_tensor_engine(t);
        staged[i] = oj_from_host(eng, oj_rank(t), oj_shape(t), oj_tensor_dtype(t), src, nbytes);
        if (!staged[i])
            rc = oj_error_set(err, oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_CAPACITY,
                              "checkpoint load: staging %s failed: %s", nt->names[i],
                              oj_last_error(eng));
    }
    for (int64_t i = 0; i < n && !rc; i++) {
        oj_tensor *t = nt->tensors[i];
        if (staged[i]) {
            oj_status c = oj_copy_(t, staged[i]);
            if (c) /* same shape, dtype and device: only a device fault gets here */
                rc = oj_error_set(err, c, "checkpoint load: copy into %s failed: %s", nt->names[i],
                                  oj_last_error(oj_tensor_engine(t)));
            continue;
        }
        size_t nbytes;
        const void *src = oj_safetensors_data(st, oj_safetensors_find(st, nt->names[i]), &nbytes);
        if (nbytes) memcpy(oj__data_ptr(t), src, nbytes);
        oj_bump_version(t);
    }
    for (int64_t i = 0; i < n; i++) oj_release(staged[i]);
    free(staged);
    return rc;
}

/* Prefix the message in err with the checkpoint directory. */
static void name_dir(oj_error *err, const char *dir) {
    if (!err || !err->status || strstr(err->message, dir)) return;
    char prefix[4100];
    snprintf(prefix, sizeof prefix, "%s: ", dir);
    oj__error_prefix(err, prefix);
}

static oj_status load(const char *dir, const oj_named_tensors *model, const oj_named_tensors *optim,
                      oj_checkpoint_info *info, oj_error *err) {
    if (info) {
        memset(info, 0, sizeof *info);
        info->step = -1;
    }
    if (!dir) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint load: dir is NULL");
    live lm = {0}, lo = {0};
    oj_status rc = OJ_OK;
    if (model) rc = live_build(model, "model", &lm, err);
    if (!rc && optim) rc = live_build(optim, "optimizer", &lo, err);
    if (rc) {
        live_free(&lm);
        return rc;
    }
    char path[4096];
    uint8_t *manifest = NULL, *state = NULL;
    size_t manifest_len = 0, state_len = 0;
    oj__mapping *maps[2] = {NULL, NULL};
    rc = oj__path_join(path, sizeof path, dir, OJ__CKPT_MANIFEST, err);
    if (!rc) rc = oj__read_file(path, OJ__JSON_MAX_BYTES, &manifest, &manifest_len, err);
    if (!rc) rc = oj__path_join(path, sizeof path, dir, oj__ckpt_files[OJ__CKPT_STATE], err);
    if (!rc) rc = oj__read_file(path, OJ__JSON_MAX_BYTES, &state, &state_len, err);
    for (int f = OJ__CKPT_MODEL; f <= OJ__CKPT_OPTIM && !rc; f++) {
        rc = oj__path_join(path, sizeof path, dir, oj__ckpt_files[f], err);
        if (!rc) rc = oj__map_file(path, &maps[f], err);
    }
    int64_t step = -1;
    char *state_json = NULL;
    oj_safetensors *mst = NULL, *ost = NULL;
    if (!rc) {
        oj__ckpt_bytes b = {
            .manifest = manifest, .manifest_len = manifest_len,
            .state = state, .state_len = state_len,
            .model = maps[0]->base, .model_len = maps[0]->len,
            .optim = maps[1]->base, .optim_len = maps[1]->len,
        };
        rc = oj__ckpt_validate(&b, true, model ? &lm.ex : NULL, optim ? &lo.ex : NULL, &step,
                               info ? &state_json : NULL, model ? &mst : NULL, optim ? &ost : NULL,
                               err);
    }
    /* everything is validated: now, and only now, write live tensors */
    if (!rc && model) rc = apply(model, mst, err);
    if (!rc && optim) rc = apply(optim, ost, err);
    oj_safetensors_close(mst);
    oj_safetensors_close(ost);
    oj__map_release(maps[0]);
    oj__map_release(maps[1]);
    free(manifest);
    free(state);
    live_free(&lm);
    live_free(&lo);
    if (rc) {
        free(state_json);
        name_dir(err, dir);
        return rc;
    }
    if (info) {
        info->step = step;
        info->state_json = state_json;
        snprintf(info->dir, sizeof info->dir, "%s", dir);
    }
    return OJ_OK;
}

oj_status oj_checkpoint_load(const char *dir, const oj_named_tensors *model,
                             const oj_named_tensors *optim, oj_checkpoint_info *info,
                             oj_error *err) {
    return load(dir, model, optim, info, err);
}

oj_status oj_checkpoint_verify(const char *dir, oj_error *err) {
    return load(dir, NULL, NULL, NULL, err);
}

/* The checkpoints under root in the order they are tried: the one `latest`
 * names, then the others by decreasing step. *order is malloc'd. */
static oj_status candidates(const char *root, int64_t **order, int64_t *m, oj_error *err) {
    int64_t *steps = NULL, n = 0, latest = -1;
    *order = NULL;
    *m = 0;
    oj_status rc = oj_checkpoint_list(root, &steps, &n, err);
    if (rc) return rc;
    if (n == 0) {
        free(steps);
        return oj_error_set(err, OJ_ERR_IO, "checkpoint resume: no checkpoint under %s", root);
    }
    if (oj_checkpoint_latest(root, &latest, NULL) != OJ_OK) latest = -1;
    int64_t *o = malloc((size_t)n * sizeof *o), k = 0;
    if (!o) {
        free(steps);
        return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint resume: out of host memory");
    }
    for (int64_t i = 0; i < n; i++)
        if (steps[i] == latest) o[k++] = latest;
    for (int64_t i = n - 1; i >= 0; i--)
        if (steps[i] != latest) o[k++] = steps[i];
    free(steps);
    *order = o;
    *m = k;
    return OJ_OK;
}

/* Try dirs of order[0..m) under root with load(); the first success wins,
 * CORRUPT / IO refusals are skipped, anything else stops the search. When
 * every candidate is refused, err says so and gives each one's reason
 * (newest first, cut to fit) and the status is the newest one's. */
static oj_status first_good(const char *root, const int64_t *order, int64_t m,
                            const oj_named_tensors *model, const oj_named_tensors *optim,
                            oj_checkpoint_info *info, int *skipped_out, oj_error *refused,
                            oj_error *err) {
    oj_error first = {0};
    int skipped = 0;
    oj_status rc = OJ_OK;
    char dir[4096];
    char why[sizeof first.message] = ""; /* "; ckpt-NNNNNN refused: <reason>" each */
    size_t wl = 0;
    for (int64_t i = 0; i < m; i++) {
        oj_error e = {0};
        if (oj_checkpoint_path(root, order[i], dir, sizeof dir) != OJ_OK) {
            rc = oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "checkpoint resume: root %s is too long", root);
            break;
        }
        rc = load(dir, model, optim, info, &e);
        if (rc == OJ_OK) break;
        if (rc != OJ_ERR_CORRUPT && rc != OJ_ERR_IO) {
            oj_error_set(err, e.status, "%s", e.message);
            break;
        }
        if (!first.status) first = e;
        if (wl < sizeof why)
            wl += (size_t)snprintf(why + wl, sizeof why - wl, "; ckpt-%06lld refused: %s",
                                   (long long)order[i], e.message);
        skipped++;
    }
    *skipped_out = skipped;
    if (refused) *refused = first;
    if (rc == OJ_ERR_CORRUPT || rc == OJ_ERR_IO) {
        /* every candidate was refused: say why each one was */
        rc = oj_error_set(err, first.status,
                          "checkpoint resume: no good checkpoint found under %s, all %d refused%s",
                          root, skipped, why);
    }
    return rc;
}

oj_status oj_checkpoint_resume(const char *root, const oj_named_tensors *model,
                               const oj_named_tensors *optim, oj_checkpoint_info *info,
                               oj_error *err) {
    if (info) {
        memset(info, 0, sizeof *info);
        info->step = -1;
    }
    int64_t *order = NULL, m = 0;
    oj_status rc = candidates(root, &order, &m, err);
    if (rc) return rc;
    int skipped = 0;
    rc = first_good(root, order, m, model, optim, info, &skipped, NULL, err);
    free(order);
    if (!rc && info) info->skipped = skipped;
    return rc;
}

oj_status oj_checkpoint_find(const char *path, char *dir, size_t len, int *skipped,
                             oj_error *refused, oj_error *err) {
    if (skipped) *skipped = 0;
    if (refused) memset(refused, 0, sizeof *refused);
    if (!path || !dir || len == 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint find: NULL argument");
    char manifest[4200];
    struct stat sb;
    snprintf(manifest, sizeof manifest, "%s/%s", path, OJ__CKPT_MANIFEST);
    if (stat(manifest, &sb) == 0 && S_ISREG(sb.st_mode)) { /* a checkpoint directory */
        oj_status rc = oj_checkpoint_verify(path, err);
        if (!rc && snprintf(dir, len, "%s", path) >= (int)len)
            rc = oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "checkpoint find: %s is too long", path);
        return rc;
    }
    int64_t *order = NULL, m = 0;
    oj_status rc = candidates(path, &order, &m, err);
    if (rc) return rc;
    oj_checkpoint_info info;
    int n_skipped = 0;
    memset(&info, 0, sizeof info);
    rc = first_good(path, order, m, NULL, NULL, &info, &n_skipped, refused, err);
    free(order);
    free(info.state_json);
    if (!rc && snprintf(dir, len, "%s", info.dir) >= (int)len)
        rc = oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "checkpoint find: %s is too long", info.dir);
    if (!rc && skipped) *skipped = n_skipped;
    return rc;
}
