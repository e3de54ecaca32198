/* Shared validation and helpers of the nn ops. */
#include "ops/nn_common.h"

bool oj__nn_check_float(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t) {
    if (oj_dtype_is_float(t->dtype)) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s must be a float tensor (f32, f64, bf16, f16), got %s",
                 op, arg, oj_dtype_name(t->dtype));
    return false;
}

bool oj__nn_check_same_dtype(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                             const char *ref_arg, const oj_tensor *ref) {
    if (t->dtype == ref->dtype) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s is %s but %s is %s (expected one dtype)", op, arg,
                 oj_dtype_name(t->dtype), ref_arg, oj_dtype_name(ref->dtype));
    return false;
}

bool oj__nn_check_index(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t) {
    if (t->dtype == OJ_I64 || t->dtype == OJ_I32) return true;
    oj_set_error(eng, OJ_ERR_DTYPE, "%s: %s must be an i64 or i32 index tensor, got %s", op, arg,
                 oj_dtype_name(t->dtype));
    return false;
}

bool oj__nn_check_vec(oj_engine *eng, const char *op, const char *arg, const oj_tensor *t,
                      int64_t C, const oj_tensor *x) {
    if (t->rank == 1 && t->shape[0] == C) return true;
    char b1[160], b2[160];
    oj_set_error(eng, OJ_ERR_SHAPE, "%s: %s has shape %s but x %s needs [%lld]", op, arg,
                 oj__shape_fmt(b1, sizeof b1, t->rank, t->shape),
                 oj__shape_fmt(b2, sizeof b2, x->rank, x->shape), (long long)C);
    return false;
}

bool oj__nn_check_reduction(oj_engine *eng, const char *op, int reduction) {
    if (reduction == OJ_REDUCTION_MEAN || reduction == OJ_REDUCTION_SUM ||
        reduction == OJ_REDUCTION_NONE)
        return true;
    oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                 "%s: reduction %d is not OJ_REDUCTION_MEAN, _SUM or _NONE", op, reduction);
    return false;
}

oj_dtype oj__nn_stat_dtype(oj_dtype dt) { return dt == OJ_F64 ? OJ_F64 : OJ_F32; }

oj_tensor *oj__nn_contig(oj_tensor *t) { return oj__contiguous(t); }

oj_tensor *oj__nn_rows(oj_tensor *t) {
    int64_t shape[2] = {1, t->rank ? t->shape[t->rank - 1] : 1};
    for (int d = 0; d + 1 < t->rank; d++) shape[0] *= t->shape[d];
    return oj__tensor_view(t, 2, shape, NULL, t->offset);
}

oj_tensor *oj__nn_alias(oj_tensor *out) {
    return oj__tensor_view(out, out->rank, out->shape, out->stride, out->offset);
}

oj_tensor *oj__nn_count_rows(oj_tensor *t, int64_t ignore_index) {
    /* the fill value is a double: exact up to 2^53 in magnitude */
    const int64_t big = (int64_t)1 << 53;
    oj_tensor *k, *m = NULL;
    if (ignore_index >= -big && ignore_index <= big) {
        k = oj_scalar(t->eng, (double)ignore_index, OJ_I64);
        if (k) m = oj_ne(t, k);
    } else { /* ignore_index is no class (V <= 2^53), and the kernel refused any
              * other target outside [0, V): the counted rows are those in [0, 2^53] */
        k = oj_scalar(t->eng, ignore_index > 0 ? (double)big : -(double)big, OJ_I64);
        if (k) m = ignore_index > 0 ? oj_le(t, k) : oj_ge(t, k);
    }
    oj_tensor *n = m ? oj_sum_all(m) : NULL; /* i64 */
    oj_tensor *c = n ? oj_cast(n, OJ_F64) : NULL;
    oj_release(n);
    oj_release(m);
    oj_release(k);
    return c;
}

oj_tensor *oj__nn_inv_count(oj_tensor *count, oj_dtype dt, bool grad) {
    oj_tensor *r = oj_reciprocal(count), *z = NULL, *pos = NULL;
    if (r && grad) { /* count > 0 ? 1 / count : 0 */
        z = oj_scalar(count->eng, 0.0, OJ_F64);
        pos = z ? oj_gt(count, z) : NULL;
        oj_tensor *w = pos ? oj_where(pos, r, z) : NULL;
        oj_release(r);
        r = w;
    }
    oj_release(pos);
    oj_release(z);
    if (r == NULL || r->dtype == dt) return r;
    oj_tensor *out = oj_cast(r, dt);
    oj_release(r);
    return out;
}

oj_tensor *oj__nn_reduce(oj_tensor *l, oj_reduction reduction) {
    if (l == NULL) return NULL;
    if (reduction == OJ_REDUCTION_MEAN) return oj_mean_all(l);
    if (reduction == OJ_REDUCTION_SUM) return oj_sum_all(l);
    return oj_retain(l);
}

void oj__nn_save_temp(oj_node *nd, oj_tensor *t) {
    oj__node_save(nd, t);
    oj__scope_detach(t);
    oj_release(t);
}
