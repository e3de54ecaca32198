/* What the machine can give an engine: host memory (physical memory capped
 * by the cgroup v2 and v1 memory limits) or, through the backend, device
 * memory; the default root budget leaves a margin of it; and the room left
 * in an engine's budgets, for preflight checks before large allocations. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/internal.h"

/* The first integer of a small file; false for "max", a missing file or
 * anything else. */
static bool read_limit(const char *path, int64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char buf[64] = {0};
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || buf[0] < '0' || buf[0] > '9') return false;
    char *end;
    unsigned long long x = strtoull(buf, &end, 10);
    if (*end != '\n' && *end != '\0') return false;
    /* v1 writes "no limit" as a page-rounded 2^63 - 1 */
    if (x >= (1ull << 62)) return false;
    *v = (int64_t)x;
    return true;
}

/* min(*best, the limit in file `name` of `dir`/`path` and each of its
 * ancestors up to `dir` itself): a cgroup is held to its parents' limits. */
static void walk_limits(const char *dir, const char *path, const char *name, int64_t *best) {
    char p[4096];
    size_t pl = strlen(path);
    if (pl >= 2048) return;
    char cur[2048];
    memcpy(cur, path, pl + 1);
    for (;;) {
        while (pl > 1 && cur[pl - 1] == '/') cur[--pl] = '\0';
        int n = snprintf(p, sizeof p, "%s%s%s/%s", dir, cur[0] == '/' ? "" : "/",
                         strcmp(cur, "/") == 0 ? "" : cur, name);
        int64_t v;
        if (n > 0 && (size_t)n < sizeof p && read_limit(p, &v) && v < *best) *best = v;
        char *slash = strrchr(cur, '/');
        if (!slash || pl <= 1) break;
        if (slash == cur) {
            cur[1] = '\0', pl = 1; /* the root last */
        } else {
            *slash = '\0', pl = (size_t)(slash - cur);
        }
    }
}

int64_t oj__host_memory_bytes(const char *cgroup_root, const char *proc_cgroup) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    int64_t best = pages > 0 && psize > 0 ? (int64_t)pages * (int64_t)psize : INT64_MAX;
    /* /proc/self/cgroup: "0::<path>" (v2) and "<n>:<controllers>:<path>"
     * (v1, the line whose controllers include memory) */
    FILE *f = proc_cgroup ? fopen(proc_cgroup, "r") : NULL;
    char line[4096], v1dir[4200];
    bool seen2 = false, seen1 = false;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = '\0', *c2 = '\0';
        const char *ctl = c1 + 1, *path = c2 + 1;
        if (strcmp(line, "0") == 0 && ctl[0] == '\0') {
            walk_limits(cgroup_root, path, "memory.max", &best);
            seen2 = true;
            continue;
        }
        for (const char *t = ctl; t && *t; t = strchr(t, ',') ? strchr(t, ',') + 1 : NULL) {
            size_t tl = strcspn(t, ",");
            if (tl == 6 && memcmp(t, "memory", 6) == 0) {
                snprintf(v1dir, sizeof v1dir, "%s/memory", cgroup_root);
                walk_limits(v1dir, path, "memory.limit_in_bytes", &best);
                seen1 = true;
                break;
            }
        }
    }
    if (f) fclose(f);
    /* a cgroup namespace shows the container's own cgroup as the root */
    if (!seen2) walk_limits(cgroup_root, "/", "memory.max", &best);
    if (!seen1) {
        snprintf(v1dir, sizeof v1dir, "%s/memory", cgroup_root);
        walk_limits(v1dir, "/", "memory.limit_in_bytes", &best);
    }
    return best == INT64_MAX ? 0 : best;
}

int64_t oj__budget_with_margin(int64_t avail) {
    if (avail <= 0) return OJ_UNLIMITED;
    int64_t m = avail / 10;
    if (m < (INT64_C(64) << 20)) m = INT64_C(64) << 20;
    if (m > (INT64_C(2) << 30)) m = INT64_C(2) << 30;
    if (m > avail / 2) m = avail / 2;
    return avail - m;
}

void oj__engine_default_budget(oj_engine *eng) {
    int64_t avail = 0;
    if (eng->backend->memory_info) {
        int64_t fr = 0, tot = 0;
        if (eng->backend->memory_info(eng, &fr, &tot) == OJ_OK) avail = fr;
    } else {
        avail = oj__host_memory_bytes("/sys/fs/cgroup", "/proc/self/cgroup");
    }
    oj_budget_set_limit(eng->root_budget, oj__budget_with_margin(avail));
}

int64_t oj__budget_room(oj_engine *eng, oj_budget **tightest) {
    int64_t room = INT64_MAX;
    oj_budget *which = NULL;
    for (oj_budget *b = eng->budget; b; b = oj_budget_parent(b)) {
        int64_t r = oj_budget_limit(b) - oj_budget_current(b);
        /* the pool's free blocks sit on the root and are given back when a
         * reservation would fail */
        if (oj_budget_parent(b) == NULL) r += oj_engine_pooled_bytes(eng);
        if (r < room) room = r, which = b;
    }
    if (tightest) *tightest = which;
    return room < 0 ? 0 : room;
}
