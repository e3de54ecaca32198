/* Hierarchical byte budgets. A reservation is checked against the budget and
 * every ancestor, then applied to all of them, under the root's mutex, so a
 * tree of budgets can be shared by threads. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

struct oj_budget {
    char *name;
    int64_t limit, current, peak;
    int64_t children;
    oj_budget *parent, *root;
    oj_budget *ceiling;   /* root of an engine's tree: the process ceiling it is charged to */
    pthread_mutex_t lock; /* used on the root only */
};

/* The process-wide memory ceiling (oj_set_memory_ceiling): a root budget of
 * its own that every CPU engine's root budget is charged to as well, and
 * the count of open engines, both under g_lock. The ceiling pointer of an
 * engine's root is set when the engine opens and cannot change while any
 * engine is open, so reservations read it without g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static oj_budget *g_ceiling;
static int64_t g_engines;

static void lock(const oj_budget *b) { pthread_mutex_lock(&b->root->lock); }
static void unlock(const oj_budget *b) { pthread_mutex_unlock(&b->root->lock); }

oj_budget *oj_budget_create(oj_budget *parent, const char *name, int64_t limit) {
    if (limit < 0) return NULL;
    oj_budget *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    b->name = strdup(name ? name : "");
    if (b->name == NULL) {
        free(b);
        return NULL;
    }
    b->limit = limit;
    b->parent = parent;
    if (parent == NULL) {
        b->root = b;
        if (pthread_mutex_init(&b->lock, NULL) != 0) {
            free(b->name);
            free(b);
            return NULL;
        }
    } else {
        b->root = parent->root;
        lock(b);
        parent->children++;
        unlock(b);
    }
    return b;
}

oj_status oj_budget_free(oj_budget *b) {
    if (b == NULL) return OJ_OK;
    lock(b);
    if (b->children > 0 || b->current > 0) {
        unlock(b);
        return OJ_ERR_STATE;
    }
    if (b->parent) b->parent->children--;
    unlock(b);
    if (b->root == b) pthread_mutex_destroy(&b->lock);
    free(b->name);
    free(b);
    return OJ_OK;
}

/* Caller holds the lock. */
static oj_budget *first_over(oj_budget *b, int64_t bytes) {
    for (oj_budget *a = b; a; a = a->parent)
        if (a->current > a->limit - bytes) return a;
    return NULL;
}

static void apply(oj_budget *b, int64_t bytes) {
    for (oj_budget *a = b; a; a = a->parent) {
        a->current += bytes;
        if (a->current > a->peak) a->peak = a->current;
    }
}

oj_status oj__budget_reserve_ex(oj_budget *b, int64_t bytes, oj_budget **failed) {
    if (b == NULL || bytes < 0) return OJ_ERR_INVALID_ARGUMENT;
    lock(b);
    oj_budget *over = first_over(b, bytes);
    oj_budget *ceiling = b->root->ceiling;
    if (over == NULL && ceiling) { /* the ceiling's lock nests inside the tree's */
        lock(ceiling);
        if (ceiling->current > ceiling->limit - bytes) over = ceiling;
        else apply(ceiling, bytes);
        unlock(ceiling);
    }
    if (over == NULL) apply(b, bytes);
    unlock(b);
    if (failed) *failed = over;
    return over ? OJ_ERR_CAPACITY : OJ_OK;
}

oj_status oj_budget_reserve(oj_budget *b, int64_t bytes) { return oj__budget_reserve_ex(b, bytes, NULL); }

oj_status oj_budget_release(oj_budget *b, int64_t bytes) {
    if (b == NULL || bytes < 0) return OJ_ERR_INVALID_ARGUMENT;
    lock(b);
    if (bytes > b->current) {
        unlock(b);
        return OJ_ERR_STATE;
    }
    for (oj_budget *a = b; a; a = a->parent) a->current -= bytes;
    oj_budget *ceiling = b->root->ceiling;
    if (ceiling) {
        lock(ceiling);
        ceiling->current -= bytes;
        unlock(ceiling);
    }
    unlock(b);
    return OJ_OK;
}

oj_status oj__budget_move(oj_budget *from, oj_budget *to, int64_t bytes, oj_budget **failed) {
    if (failed) *failed = NULL;
    if (from == NULL || to == NULL || bytes < 0 || from->root != to->root)
        return OJ_ERR_INVALID_ARGUMENT;
    if (from == to) return OJ_OK;
    lock(from);
    if (bytes > from->current) {
        unlock(from);
        return OJ_ERR_STATE;
    }
    for (oj_budget *a = from; a; a = a->parent) a->current -= bytes;
    oj_budget *over = first_over(to, bytes);
    if (over == NULL) apply(to, bytes);
    else
        for (oj_budget *a = from; a; a = a->parent) a->current += bytes; /* undo */
    unlock(from);
    if (failed) *failed = over;
    return over ? OJ_ERR_CAPACITY : OJ_OK;
}

oj_status oj_budget_set_limit(oj_budget *b, int64_t limit) {
    if (b == NULL || limit < 0) return OJ_ERR_INVALID_ARGUMENT;
    oj_status st = OJ_OK;
    lock(b);
    if (limit < b->current) st = OJ_ERR_CAPACITY;
    else b->limit = limit;
    unlock(b);
    return st;
}

static int64_t read_field(const oj_budget *b, const int64_t *field) {
    lock(b);
    int64_t v = *field;
    unlock(b);
    return v;
}

int64_t oj_budget_limit(const oj_budget *b) { return b ? read_field(b, &b->limit) : 0; }
int64_t oj_budget_current(const oj_budget *b) { return b ? read_field(b, &b->current) : 0; }
int64_t oj_budget_peak(const oj_budget *b) { return b ? read_field(b, &b->peak) : 0; }

void oj_budget_reset_peak(oj_budget *b) {
    if (b == NULL) return;
    lock(b);
    b->peak = b->current;
    unlock(b);
}

const char *oj_budget_name(const oj_budget *b) { return b ? b->name : ""; }
oj_budget *oj_budget_parent(const oj_budget *b) { return b ? b->parent : NULL; }
oj_budget *oj__budget_root(const oj_budget *b) { return b ? b->root : NULL; }

/* ---------------------------------------------------------------- process ceiling */

oj_status oj_set_memory_ceiling(int64_t bytes, oj_error *err) {
    if (bytes < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "set_memory_ceiling: %lld bytes < 0",
                            (long long)bytes);
    int64_t phys = oj__host_memory_bytes("/sys/fs/cgroup", "/proc/self/cgroup");
    if (bytes > 0 && phys > 0 && bytes > phys)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "set_memory_ceiling: %lld bytes is above the %lld bytes of memory this "
                            "process may use (physical memory within its cgroup limits)",
                            (long long)bytes, (long long)phys);
    oj_budget *fresh = NULL;
    if (bytes > 0 && (fresh = oj_budget_create(NULL, "process memory ceiling", bytes)) == NULL)
        return oj_error_set(err, OJ_ERR_CAPACITY, "set_memory_ceiling: out of host memory");
    pthread_mutex_lock(&g_lock);
    if (g_engines > 0) {
        int64_t n = g_engines;
        pthread_mutex_unlock(&g_lock);
        oj_budget_free(fresh);
        return oj_error_set(err, OJ_ERR_STATE,
                            "set_memory_ceiling: refused while %lld engine(s) are open (close "
                            "every model, trainer and engine first)",
                            (long long)n);
    }
    oj_budget *old = g_ceiling;
    g_ceiling = fresh;
    pthread_mutex_unlock(&g_lock);
    oj_budget_free(old); /* no engine is open: nothing is reserved on it */
    return OJ_OK;
}

int64_t oj_memory_ceiling(void) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_ceiling ? g_ceiling->limit : 0;
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t oj_memory_ceiling_current(void) {
    pthread_mutex_lock(&g_lock);
    oj_budget *c = g_ceiling;
    int64_t v = c ? oj_budget_current(c) : 0;
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t oj_engines_open(void) {
    pthread_mutex_lock(&g_lock);
    int64_t v = g_engines;
    pthread_mutex_unlock(&g_lock);
    return v;
}

int64_t oj_host_memory_bytes(void) {
    return oj__host_memory_bytes("/sys/fs/cgroup", "/proc/self/cgroup");
}

int64_t oj__engine_register(oj_budget *root, bool host) {
    pthread_mutex_lock(&g_lock);
    g_engines++;
    if (host) root->ceiling = g_ceiling;
    int64_t limit = root->ceiling ? root->ceiling->limit : 0;
    pthread_mutex_unlock(&g_lock);
    return limit;
}

void oj__engine_unregister(void) {
    pthread_mutex_lock(&g_lock);
    g_engines--;
    pthread_mutex_unlock(&g_lock);
}
