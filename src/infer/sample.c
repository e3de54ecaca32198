/* Token sampling: repetition penalty, temperature, top-k, top-p. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ojas/infer.h"

oj_sampler_config oj_sampler_config_default(void) {
    oj_sampler_config c = {1.0, 0, 1.0, 1.0, 0, 64, -1};
    return c;
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

/* The k highest-ranked of c[0..V) moved to c[0..k) in rank order: exactly
 * the first k entries of the whole array sorted by by_logit_desc (a total
 * order), in O(V log k) instead of O(V log V). 0 < k < V. */
static void top_k_sorted(cand *c, int64_t V, int64_t k) {
    for (int64_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (int64_t i = k; i < V; i++)
        if (ranks_before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
}

int32_t oj_sample_logits(const float *logits, int64_t V, const oj_sampler_config *cfg,
                         const int32_t *history, int64_t n, double u) {
    if (logits == NULL || V <= 0 || cfg == NULL) return -1;
    if (cfg->temperature <= 0.0 && (cfg->repetition_penalty == 1.0 || history == NULL)) {
        /* greedy without a penalty: one pass, no candidate array */
        int64_t best = 0;
        for (int64_t i = 0; i < V; i++) {
            if (isnan(logits[i])) return -1;
            if (logits[i] > logits[best]) best = i; /* ties: the lowest id */
        }
        return (int32_t)best;
    }
    cand *c = malloc((size_t)V * sizeof *c);
    if (c == NULL) return -1;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i])) {
            free(c);
            return -1;
        }
        c[i].logit = logits[i];
        c[i].id = (int32_t)i;
    }
    /* Repetition penalty on each distinct token seen (CTRL): positive logits
     * are divided by the penalty, negative ones multiplied. */
    if (cfg->repetition_penalty != 1.0 && history) {
        for (int64_t k = 0; k < n; k++) {
            int32_t t = history[k];
            if (t < 0 || t >= V) continue;
            bool seen = false;
            for (int64_t j = 0; j < k && !seen; j++) seen = history[j] == t;
            if (seen) continue;
            double *l = &c[t].logit;
            *l = *l > 0 ? *l / cfg->repetition_penalty : *l * cfg->repetition_penalty;
        }
    }
    int32_t out;
    if (cfg->temperature <= 0.0) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (c[i].logit > c[best].logit) best = i;
        out = c[best].id;
        free(c);
        return out;
    }
    int64_t keep = V;
    if (cfg->top_k > 0 && cfg->top_k < keep) keep = cfg->top_k;
    if (keep < V) top_k_sorted(c, V, keep); /* what a full sort puts first */
    else qsort(c, (size_t)V, sizeof *c, by_logit_desc);
    /* Softmax over the kept candidates at the temperature. */
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
    out = c[keep - 1].id;
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
