/* Scopes: each holds one reference to every handle created while it is the
 * innermost scope, released at oj_scope_end. Handles record their slot, so
 * releasing one early removes it in O(1) (the last entry moves into its
 * slot). */
#include <stdlib.h>

#include "core/internal.h"

static bool scope_reserve(oj_engine *eng, oj_scope *s) {
    if (s->len < s->cap) return true;
    int64_t cap = s->cap ? s->cap * 2 : 64;
    oj_tensor **items = realloc(s->items, (size_t)cap * sizeof *items);
    if (items == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "scope: out of host memory growing the scope list");
        return false;
    }
    s->items = items;
    s->cap = cap;
    return true;
}

static void attach_at(oj_engine *eng, oj_tensor *t, int depth) {
    oj_scope *s = &eng->scopes[depth];
    t->scope_depth = depth;
    t->scope_slot = s->len;
    s->items[s->len++] = t;
}

bool oj__scope_attach(oj_engine *eng, oj_tensor *t) {
    t->scope_depth = 0;
    t->scope_slot = -1;
    if (eng->depth == 0) return true;
    if (!scope_reserve(eng, &eng->scopes[eng->depth])) return false;
    attach_at(eng, t, eng->depth);
    return true;
}

void oj__scope_detach(oj_tensor *t) {
    if (t->scope_depth == 0) return;
    oj_scope *s = &t->eng->scopes[t->scope_depth];
    oj_tensor *last = s->items[--s->len];
    if (last != t) {
        s->items[t->scope_slot] = last;
        last->scope_slot = t->scope_slot;
    }
    t->scope_depth = 0;
    t->scope_slot = -1;
}

oj_status oj_scope_begin(oj_engine *eng) {
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (eng->depth >= OJ_MAX_SCOPE_DEPTH)
        return oj_set_error(eng, OJ_ERR_STATE, "scope_begin: scopes nest at most %d deep",
                            OJ_MAX_SCOPE_DEPTH);
    eng->depth++;
    eng->scopes[eng->depth].len = 0;
    return OJ_OK;
}

oj_status oj_scope_end(oj_engine *eng) {
    if (eng == NULL) return OJ_ERR_INVALID_ARGUMENT;
    if (eng->depth == 0) return oj_set_error(eng, OJ_ERR_STATE, "scope_end: no scope is open");
    oj_scope *s = &eng->scopes[eng->depth];
    /* Newest first; releasing one may release others (grads), which then
     * leave the list themselves. */
    while (s->len > 0) {
        oj_tensor *t = s->items[s->len - 1];
        oj__scope_detach(t);
        oj_release(t);
    }
    eng->depth--;
    return OJ_OK;
}

oj_tensor *oj_keep(oj_tensor *t) {
    oj_engine *eng = oj__engine_of(t);
    if (!oj__check_tensor(eng, t, "keep", "tensor")) return NULL;
    /* Unscoped, or in an outer scope: it already outlives the current one. */
    if (t->scope_depth == 0 || t->scope_depth < eng->depth) return t;
    int target = t->scope_depth - 1;
    if (target > 0 && !scope_reserve(eng, &eng->scopes[target])) return NULL;
    oj__scope_detach(t);
    if (target > 0) attach_at(eng, t, target);
    return t;
}

int oj_scope_depth(const oj_engine *eng) { return eng ? eng->depth : 0; }
