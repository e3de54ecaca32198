/* Internal definitions of src/nn. */
#ifndef OJAS_NN_INTERNAL_H
#define OJAS_NN_INTERNAL_H

#include "ojas/nn.h"

struct oj_params {
    oj_engine *eng;
    uint64_t seed;
    bool training;
    int64_t n, cap;
    char **names;       /* owned */
    oj_tensor **tensors; /* owned references, unscoped */
    bool *buffer;
};

#endif /* OJAS_NN_INTERNAL_H */
