/* Engine lifetime and settings: device, numerics, threads, seed, budgets,
 * grad mode. Every piece of mutable state lives here; nothing is global. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/env.h"
#include "core/internal.h"

bool oj_device_parse(const char *s, oj_device *d) {
    if (s == NULL || d == NULL) return false;
    if (strcmp(s, "cpu") == 0) {
        *d = (oj_device){OJ_DEVICE_CPU, 0};
        return true;
    }
    if (strncmp(s, "cuda", 4) != 0) return false;
    if (s[4] == 0) {
        *d = (oj_device){OJ_DEVICE_CUDA, 0};
        return true;
    }
    if (s[4] != ':' || s[5] < '0' || s[5] > '9') return false;
    char *end;
    errno = 0;
    long v = strtol(s + 5, &end, 10);
    if (errno || *end || v > 1024) return false;
    *d = (oj_device){OJ_DEVICE_CUDA, (int)v};
    return true;
}

void oj_device_name(oj_device d, char *buf, size_t len) {
    if (d.type == OJ_DEVICE_CPU)
        snprintf(buf, len, "cpu");
    else if (d.index == 0)
        snprintf(buf, len, "cuda");
    else
        snprintf(buf, len, "cuda:%d", d.index);
}

oj_engine_config oj_engine_config_default(void) {
    oj_engine_config c = {.device = {OJ_DEVICE_CPU, 0},
                          .numerics = OJ_NUMERICS_FAST,
                          .threads = 0,
                          .seed = 0,
                          .budget_bytes = 0};
    return c;
}

/* CPUs this process may run on (affinity mask), capped by a cgroup v2
 * quota ("max" or "<quota> <period>" in /sys/fs/cgroup/cpu.max). */
static int usable_cpus(void) {
    int n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        long long quota = 0, period = 0;
        if (fscanf(f, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0) {
            long long q = (quota + period - 1) / period;
            if (q < n) n = (int)q;
        }
        fclose(f);
    }
    return n < 1 ? 1 : n;
}

oj_status oj_engine_create(const oj_engine_config *cfg, oj_engine **out, oj_error *err) {
    if (out == NULL)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: out is NULL");
    *out = NULL;
    oj_engine_config c = cfg ? *cfg : oj_engine_config_default();
    if (c.device.type != OJ_DEVICE_CPU && c.device.type != OJ_DEVICE_CUDA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: unknown device type %d",
                            (int)c.device.type);
    if (c.device.index < 0 || (c.device.type == OJ_DEVICE_CPU && c.device.index != 0))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "engine_create: device index %d is invalid for %s", c.device.index,
                            c.device.type == OJ_DEVICE_CPU ? "cpu (must be 0)" : "cuda");
    if (c.numerics != OJ_NUMERICS_FAST && c.numerics != OJ_NUMERICS_EXACT)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: unknown numerics %d",
                            (int)c.numerics);
    if (c.threads < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: threads %d < 0",
                            c.threads);
    if (c.budget_bytes < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: budget_bytes %lld < 0",
                            (long long)c.budget_bytes);
    const oj_backend *be = NULL;
    oj_status lst = oj__backend_load(c.device.type, &be, err); /* CUDA: loads libojas-cuda.so */
    if (lst != OJ_OK) return lst;

    oj_engine *eng = calloc(1, sizeof *eng);
    if (eng == NULL) return oj_error_set(err, OJ_ERR_CAPACITY, "engine_create: out of host memory");
    eng->device = c.device;
    eng->numerics = c.numerics;
    eng->threads = c.threads ? c.threads : usable_cpus();
    eng->seed = c.seed;
    eng->grad_enabled = true;
    eng->autocast_dtype = OJ_BF16;
    eng->detect_anomaly = oj__env_flag("OJAS_DETECT_ANOMALY", false);
    eng->backend = be;
    eng->root_budget = oj_budget_create(NULL, "root", c.budget_bytes ? c.budget_bytes : OJ_UNLIMITED);
    if (eng->root_budget == NULL) {
        free(eng);
        return oj_error_set(err, OJ_ERR_CAPACITY, "engine_create: out of host memory");
    }
    eng->budget = eng->root_budget;
    /* charged to the process memory ceiling too (host engines), counted as open */
    int64_t ceiling = oj__engine_register(eng->root_budget, c.device.type == OJ_DEVICE_CPU);
    if (be->open) {
        oj_error e = {0};
        oj_status st = be->open(eng, c.device.index, &e);
        if (st != OJ_OK) {
            oj__engine_unregister();
            oj_budget_free(eng->root_budget);
            free(eng);
            if (e.status == OJ_OK) oj_error_set(&e, st, "engine_create: cannot open %s:%d", be->name, c.device.index);
            return oj_error_set(err, st, "%s", e.message);
        }
    }
    if (c.budget_bytes == 0) oj__engine_default_budget(eng); /* what the machine can give */
    if (ceiling > 0 && c.device.type == OJ_DEVICE_CPU && oj_budget_limit(eng->root_budget) > ceiling)
        oj_budget_set_limit(eng->root_budget, ceiling); /* nothing reserved yet */
    *out = eng;
    return OJ_OK;
}

void oj_engine_free(oj_engine *eng) {
    if (eng == NULL) return;
    oj__graph_capture_abandon(eng); /* a capture still running */
    /* Layers above core first: the tape holds references to tensors. */
    for (int i = 0; i < OJ_EXT_COUNT; i++) {
        if (eng->ext[i].destroy && i != OJ_EXT_BACKEND) eng->ext[i].destroy(eng, eng->ext[i].ptr);
        if (i != OJ_EXT_BACKEND) eng->ext[i] = (oj_engine_ext){0};
    }
    while (eng->depth > 0) oj_scope_end(eng);
    oj__tensor_destroy_all(eng); /* unscoped leftovers and the quarantine */
    oj__graph_free_all(eng);     /* graphs still alive: their pools go back */
    oj__wcopies_free(eng);       /* copies of parameters never released */
    for (int d = 0; d <= OJ_MAX_SCOPE_DEPTH; d++) free(eng->scopes[d].items);
    oj_engine_trim_pool(eng);
    if (eng->backend && eng->backend->close) eng->backend->close(eng);
    if (eng->ext[OJ_EXT_BACKEND].destroy)
        eng->ext[OJ_EXT_BACKEND].destroy(eng, eng->ext[OJ_EXT_BACKEND].ptr);
    /* A user budget still hanging under the root keeps the root alive
     * (leaked) rather than leaving it with a dangling lock. */
    oj_budget_free(eng->root_budget);
    oj__engine_unregister();
    free(eng);
}

oj_device oj_engine_device(const oj_engine *eng) {
    return eng ? eng->device : (oj_device){OJ_DEVICE_CPU, 0};
}
oj_numerics oj_engine_numerics(const oj_engine *eng) { return eng ? eng->numerics : OJ_NUMERICS_FAST; }
void oj_engine_set_numerics(oj_engine *eng, oj_numerics n) {
    if (eng == NULL) return;
    if (n != OJ_NUMERICS_FAST && n != OJ_NUMERICS_EXACT) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "engine_set_numerics: unknown numerics %d", (int)n);
        return;
    }
    eng->numerics = n;
}
int oj_engine_threads(const oj_engine *eng) { return eng ? eng->threads : 0; }
uint64_t oj_engine_seed(const oj_engine *eng) { return eng ? eng->seed : 0; }
oj_budget *oj_engine_budget(oj_engine *eng) { return eng ? eng->root_budget : NULL; }

oj_status oj_engine_synchronize(oj_engine *eng) {
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    return eng->backend->synchronize ? eng->backend->synchronize(eng) : OJ_OK;
}

oj_budget *oj_engine_use_budget(oj_engine *eng, oj_budget *b) {
    if (eng == NULL) return NULL;
    oj_budget *prev = eng->budget;
    if (b == NULL) b = eng->root_budget;
    if (oj__budget_root(b) != eng->root_budget) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     "engine_use_budget: budget '%s' is not in this engine's budget tree",
                     oj_budget_name(b));
        return prev;
    }
    eng->budget = b;
    return prev;
}

int64_t oj_engine_pooled_bytes(const oj_engine *eng) { return eng ? eng->pooled_bytes : 0; }
int64_t oj_engine_memory_allocated(const oj_engine *eng) { return eng ? eng->live_bytes : 0; }
int64_t oj_engine_max_memory_allocated(const oj_engine *eng) { return eng ? eng->live_peak : 0; }
int64_t oj_engine_live_tensors(const oj_engine *eng) { return eng ? eng->live_tensors : 0; }

bool oj_set_grad_enabled(oj_engine *eng, bool enabled) {
    if (eng == NULL) return false;
    bool prev = eng->grad_enabled;
    eng->grad_enabled = enabled;
    return prev;
}
bool oj_grad_enabled(const oj_engine *eng) { return eng ? eng->grad_enabled : false; }

bool oj_set_autocast(oj_engine *eng, bool enabled, oj_dtype dt) {
    if (eng == NULL) return false;
    bool prev = eng->autocast;
    if (enabled && dt != OJ_BF16 && dt != OJ_F16) {
        oj_set_error(eng, OJ_ERR_DTYPE, "set_autocast: dtype %s is not bf16 or f16",
                     oj_dtype_valid(dt) ? oj_dtype_name(dt) : "(invalid)");
        return prev;
    }
    eng->autocast = enabled;
    if (enabled) eng->autocast_dtype = dt;
    return prev;
}
bool oj_autocast_enabled(const oj_engine *eng) { return eng ? eng->autocast : false; }
oj_dtype oj_autocast_dtype(const oj_engine *eng) { return eng ? eng->autocast_dtype : OJ_BF16; }
