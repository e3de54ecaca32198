/* Token sampling: repetition penalty, temperature, top-k, top-p. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/infer.h"

oj_sampler_config oj_sampler_config_default(void) {
    oj_sampler_config c = {1.0, 0, 1.0, 1.0, 0, 64, -1};
    return c;
}

const char *oj_logits_fault(const float *logits, int64_t V) {
    bool finite = false;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i])) return "NaN";
        if (isinf(logits[i])) {
            if (logits[i] > 0) return "+inf";
        } else {
            finite = true;
        }
    }
    return finite || V <= 0 ? NULL : "only -inf";
}

typedef struct {
    double logit;
    int32_t id;
} cand;

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id); /* stable: lower id first */
}

/* a ranks before b: the larger logit, the lower id on equal logits (the
 * total order by_logit_desc sorts by). */
static bool ranks_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Restore the heap below i: heap[0..k) with the lowest-ranked candidate at
 * the root (every parent ranks after its children). */
static void sift_down(cand *heap, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && ranks_before(&heap[w], &heap[l])) w = l;
        if (r < k && ranks_before(&heap[w], &heap[r])) w = r;
        if (w == i) return;
        cand t = heap[i];
        heap[i] = heap[w];
        heap[w] = t;
        i = w;
    }
}

static int by_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The k highest-ranked candidates of logits[0..V) (each id of seen[0..ns),
 * sorted, penalised as the full path does) in rank order, in one pass with
 * a heap of k: exactly the first k entries of the whole array sorted by
 * by_logit_desc (a total order), in O(V log k) time and O(k) memory
 * instead of a sort of V candidates. 0 < k < V. NULL on a NaN logit or
 * out of memory. */
static cand *top_k_scan(const float *logits, int64_t V, int64_t k, double penalty,
                        const int32_t *seen, int64_t ns) {
    cand *heap = malloc((size_t)k * sizeof *heap);
    if (heap == NULL) return NULL;
    int64_t filled = 0, p = 0;
    for (int64_t i = 0; i < V; i++) {
        while (p < ns && seen[p] < i) p++;
        const bool pen = p < ns && seen[p] == i;
        /* at or below the k-th best (an equal logit has a higher id): out;
         * a NaN fails the comparison and is caught below */
        if (!pen && filled == k && (double)logits[i] <= heap[0].logit) continue;
        if (isnan(logits[i])) {
            free(heap);
            return NULL;
        }
        cand ci = {logits[i], (int32_t)i};
        if (pen) ci.logit = ci.logit > 0 ? ci.logit / penalty : ci.logit * penalty;
        if (filled < k) {
            heap[filled++] = ci;
            if (filled == k)
                for (int64_t j = k / 2; j-- > 0;) sift_down(heap, k, j);
        } else if (ranks_before(&ci, &heap[0])) {
            heap[0] = ci;
            sift_down(heap, k, 0);
        }
    }
    qsort(heap, (size_t)k, sizeof *heap, by_logit_desc);
    return heap;
}

/* The distinct ids of history[0..n) inside [0, V), sorted, into a new
 * array (*out, free it; NULL when there are none); their count, or -1 out
 * of memory. */
static int64_t seen_ids(const int32_t *history, int64_t n, int64_t V, int32_t **out) {
    *out = NULL;
    if (history == NULL || n <= 0) return 0;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (ids == NULL) return -1;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (history[i] >= 0 && history[i] < V) ids[m++] = history[i];
    qsort(ids, (size_t)m, sizeof *ids, by_id);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || ids[u - 1] != ids[i]) ids[u++] = ids[i];
    *out = ids;
    return u;
}

/* Softmax at the temperature over c[0..keep) (sorted), nucleus top_p, the
 * draw from u; frees c. */
static int32_t draw_from(cand *c, int64_t keep, const oj_sampler_config *cfg, double u) {
    double mx = c[0].logit, total = 0.0;
    for (int64_t i = 0; i < keep; i++) {
        c[i].logit = exp((c[i].logit - mx) / cfg->temperature);
        total += c[i].logit;
    }
    /* Nucleus: the smallest prefix whose probability reaches top_p. */
    if (cfg->top_p < 1.0 && cfg->top_p > 0.0) {
        double acc = 0.0;
        int64_t k = 0;
        while (k < keep) {
            acc += c[k].logit / total;
            k++;
            if (acc >= cfg->top_p) break;
        }
        keep = k;
        total = 0.0;
        for (int64_t i = 0; i < keep; i++) total += c[i].logit;
    }
    double r = u * total, acc = 0.0;
    /* a draw rounding past the total takes the last token of nonzero
     * probability, never a -inf (masked) one */
    int64_t last = keep - 1;
    while (last > 0 && c[last].logit <= 0.0) last--;
    int32_t out = c[last].id;
    for (int64_t i = 0; i < keep; i++) {
        acc += c[i].logit;
        if (r < acc) {
            out = c[i].id;
            break;
        }
    }
    free(c);
    return out;
}

int32_t oj_sample_logits(const float *logits, int64_t V, const oj_sampler_config *cfg,
                         const int32_t *history, int64_t n, double u) {
    if (logits == NULL || V <= 0 || cfg == NULL) return -1;
    /* +inf would make the softmax NaN, only -inf leaves nothing to draw */
    if (oj_logits_fault(logits, V) != NULL) return -1;
    if (cfg->temperature <= 0.0 && (cfg->repetition_penalty == 1.0 || history == NULL)) {
        /* greedy without a penalty: one pass, no candidate array */
        int64_t best = 0;
        for (int64_t i = 0; i < V; i++) {
            if (isnan(logits[i])) return -1;
            if (logits[i] > logits[best]) best = i; /* ties: the lowest id */
        }
        return (int32_t)best;
    }
    if (cfg->temperature > 0.0 && cfg->top_k > 0 && cfg->top_k < V) {
        /* top-k: one pass with a heap of k, no array of V candidates */
        int32_t *seen = NULL;
        int64_t ns = cfg->repetition_penalty != 1.0 ? seen_ids(history, n, V, &seen) : 0;
        if (ns < 0) return -1;
        cand *top = top_k_scan(logits, V, cfg->top_k, cfg->repetition_penalty, seen, ns);
        free(seen);
        return top ? draw_from(top, cfg->top_k, cfg, u) : -1;
    }
    int32_t *seen = NULL;
    int64_t ns = cfg->repetition_penalty != 1.0 ? seen_ids(history, n, V, &seen) : 0;
    if (ns < 0) return -1;
    cand *c = malloc((size_t)V * sizeof *c);
    if (c == NULL) {
        free(seen);
        return -1;
    }
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i])) {
            free(c);
            free(seen);
            return -1;
        }
        c[i].logit = logits[i];
        c[i].id = (int32_t)i;
    }
    /* Repetition penalty on each distinct token seen (CTRL): positive logits
     * are divided by the penalty, negative ones multiplied. */
    for (int64_t j = 0; j < ns; j++) {
        double *l = &c[seen[j]].logit;
        *l = *l > 0 ? *l / cfg->repetition_penalty : *l * cfg->repetition_penalty;
    }
    free(seen);
    if (cfg->temperature <= 0.0) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (c[i].logit > c[best].logit) best = i;
        int32_t out = c[best].id;
        free(c);
        return out;
    }
    qsort(c, (size_t)V, sizeof *c, by_logit_desc);
    return draw_from(c, V, cfg, u);
}
