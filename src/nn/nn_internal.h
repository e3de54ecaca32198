/* Internal definitions of src/nn. */
#ifndef OJAS_NN_INTERNAL_H
#define OJAS_NN_INTERNAL_H

#include "ojas/nn.h"

struct oj_params {
    oj_engine *eng;
    uint64_t seed;
    bool training;
    int64_t n, cap;
    char **names;        /* owned */
    oj_tensor **tensors; /* owned references, unscoped */
    bool *buffer;
};

/* Drop the entries from index n on (releasing their tensors): undoes a
 * layer init that failed half-way. */
void oj__params_truncate(oj_params *p, int64_t n);
/* Register "<prefix>.<leaf>" (a parameter, or a buffer). NULL with the
 * error recorded. */
oj_tensor *oj__nn_add(oj_params *p, const char *prefix, const char *leaf, int rank,
                      const int64_t *shape, oj_dtype dt, const oj_init *init, bool buffer);
/* The status to return from a failed layer init: undo the registrations
 * made since `mark` and report the engine's error (OJ_ERR_INTERNAL if none
 * was recorded). */
oj_status oj__nn_fail(oj_params *p, int64_t mark);
/* Check a size argument of a layer init (> 0), recording
 * OJ_ERR_INVALID_ARGUMENT naming the layer and argument. */
bool oj__nn_positive(oj_params *p, const char *layer, const char *what, int64_t v);

#endif /* OJAS_NN_INTERNAL_H */
