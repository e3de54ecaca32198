/* View geometry helpers: each computes the shape, strides and byte offset
 * of a view of t without creating a handle, so the public view ops (and
 * their autograd wrappers) share one implementation. Each returns false
 * with an error recorded on t's engine, naming `op`, when the request does
 * not fit t. Negative dims count from the end. */
#ifndef OJAS_OPS_VIEWS_INTERNAL_H
#define OJAS_OPS_VIEWS_INTERNAL_H

#include "core/internal.h"

typedef struct oj_view_geom {
    int rank;
    int64_t shape[OJ_MAX_RANK];
    int64_t stride[OJ_MAX_RANK]; /* elements */
    int64_t offset;              /* bytes */
} oj_view_geom;

/* The geometry of t itself. */
void oj__view_of(const oj_tensor *t, oj_view_geom *g);
/* Normalise dim d for a rank-`rank` tensor (d in [-rank, rank-1]); false
 * with OJ_ERR_OUT_OF_RANGE recorded otherwise. */
bool oj__view_dim(oj_engine *eng, const char *op, int rank, int d, int *out);
/* Resolve a -1 in shape (copied into out) for numel elements. */
bool oj__view_infer_shape(const oj_tensor *t, const char *op, int rank, const int64_t *shape,
                          int64_t *out);
/* Reshape as a view; *viewable false (no error) when the strides forbid it.
 * shape must already be resolved (no -1) with t's numel. */
bool oj__view_reshape(const oj_tensor *t, int rank, const int64_t *shape, oj_view_geom *g,
                      bool *viewable);
bool oj__view_permute(const oj_tensor *t, const char *op, int ndims, const int *dims,
                      oj_view_geom *g);
bool oj__view_transpose(const oj_tensor *t, int d0, int d1, oj_view_geom *g);
bool oj__view_narrow(const oj_tensor *t, int dim, int64_t start, int64_t length,
                     oj_view_geom *g);
bool oj__view_slice(const oj_tensor *t, int dim, int64_t start, int64_t end, int64_t step,
                    oj_view_geom *g);
bool oj__view_expand(const oj_tensor *t, int rank, const int64_t *shape, oj_view_geom *g);
bool oj__view_squeeze(const oj_tensor *t, int dim, oj_view_geom *g);
void oj__view_squeeze_all(const oj_tensor *t, oj_view_geom *g);
bool oj__view_unsqueeze(const oj_tensor *t, int dim, oj_view_geom *g);
bool oj__view_select(const oj_tensor *t, int dim, int64_t index, oj_view_geom *g);
/* Shape of flatten(start_dim, end_dim) (rank-0 t gives [1]). */
bool oj__view_flatten_shape(const oj_tensor *t, int start_dim, int end_dim, int *rank,
                            int64_t *shape);
/* A new handle over t's storage with geometry g. */
oj_tensor *oj__view_make(oj_tensor *t, const oj_view_geom *g);

/* Autograd for views (views_grad.c). */
typedef enum oj_view_kind {
    OJ_VIEW_RESHAPE, /* reshape, view, flatten, squeeze, unsqueeze */
    OJ_VIEW_EXPAND,
    OJ_VIEW_PERMUTE,   /* params: dims */
    OJ_VIEW_TRANSPOSE, /* params: d0, d1 */
    OJ_VIEW_NARROW,    /* params: dim, start, length */
    OJ_VIEW_SLICE,     /* params: dim, start, end, step */
    OJ_VIEW_SELECT,    /* params: dim, index */
} oj_view_kind;
/* Record a node for view `out` of `in` when autograd needs it; returns out
 * (NULL stays NULL). */
oj_tensor *oj__view_record(oj_tensor *in, oj_tensor *out, const char *op, oj_view_kind kind,
                           int nparams, const int64_t *params);

#endif /* OJAS_OPS_VIEWS_INTERNAL_H */
