/* gradcheck: analytical gradients against float64 central differences. */
#include <math.h>
#include <stdlib.h>

#include "ops/ops_common.h"

/* sum(f(inputs) * r) as a double, or NAN with an error recorded. */
static double projected(oj_engine *eng, oj_gradcheck_fn f, void *ctx, oj_tensor *const *inputs,
                        int n, oj_tensor *r, oj_tensor **keep_graph) {
    oj_tensor *y = f(inputs, n, ctx);
    if (y == NULL) return NAN;
    oj_tensor *yr = r ? oj_mul(y, r) : oj_retain(y);
    oj_tensor *s = oj_sum_all(yr);
    double v = s ? oj_item(s) : NAN;
    if (keep_graph && s) *keep_graph = oj_retain(s);
    oj_release(s);
    oj_release(yr);
    oj_release(y);
    (void)eng;
    return v;
}

oj_status oj_gradcheck(oj_engine *eng, oj_gradcheck_fn f, void *ctx, oj_tensor *const *inputs,
                       int n, const oj_gradcheck_opts *opts) {
    if (eng == NULL || f == NULL || (n > 0 && inputs == NULL)) return OJ_ERR_INVALID_ARGUMENT;
    oj_gradcheck_opts o = {1e-6, 1e-5, 1e-3};
    if (opts) o = *opts;
    for (int j = 0; j < n; j++) {
        if (!oj__live(inputs[j]))
            return oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "gradcheck: input %d is not a live tensor", j);
        if (inputs[j]->requires_grad && inputs[j]->dtype != OJ_F64)
            return oj_set_error(eng, OJ_ERR_DTYPE, "gradcheck: input %d must be f64, got %s", j,
                                oj_dtype_name(inputs[j]->dtype));
        if (inputs[j]->storage->device.type != OJ_DEVICE_CPU)
            return oj_set_error(eng, OJ_ERR_DEVICE, "gradcheck: input %d must be on the CPU", j);
    }
    bool prev = oj_set_grad_enabled(eng, true);
    for (int j = 0; j < n; j++) oj_zero_grad(inputs[j]);
    /* A fixed random projection makes every output element matter. */
    oj_tensor *y0 = f(inputs, n, ctx);
    if (y0 == NULL) {
        oj_set_grad_enabled(eng, prev);
        return oj_last_status(eng) ? oj_last_status(eng) : OJ_ERR_INTERNAL;
    }
    oj_tensor *r = oj_rand_normal(eng, y0->rank, y0->shape, OJ_F64, 0.0, 1.0);
    oj_release(y0);
    oj_tensor *loss = NULL;
    double base = projected(eng, f, ctx, inputs, n, r, &loss);
    oj_status st = OJ_OK;
    if (isnan(base) && loss == NULL) st = oj_last_status(eng);
    if (st == OJ_OK && loss && loss->requires_grad) st = oj_backward(loss, false);
    oj_release(loss);
    oj_set_grad_enabled(eng, false);
    for (int j = 0; st == OJ_OK && j < n; j++) {
        oj_tensor *x = inputs[j];
        if (!x->requires_grad) continue;
        oj_tensor *g = oj_grad(x);
        int64_t numel = oj_numel(x);
        int64_t idx[OJ_MAX_RANK] = {0};
        for (int64_t e = 0; e < numel; e++) {
            double *p = oj__elem_ptr(x, idx);
            double orig = *p;
            *p = orig + o.eps;
            double fp = projected(eng, f, ctx, inputs, n, r, NULL);
            *p = orig - o.eps;
            double fm = projected(eng, f, ctx, inputs, n, r, NULL);
            *p = orig;
            double num = (fp - fm) / (2.0 * o.eps);
            double ana = g ? oj_item_at(g, e) : 0.0;
            if (!(fabs(num - ana) <= o.atol + o.rtol * fabs(num))) {
                st = oj_set_error(eng, OJ_ERR_NUMERIC,
                                  "gradcheck: input %d element %lld: analytical %.10g vs numerical "
                                  "%.10g",
                                  j, (long long)e, ana, num);
                break;
            }
            for (int d = x->rank - 1; d >= 0; d--) {
                if (++idx[d] < x->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    oj_release(r);
    oj_set_grad_enabled(eng, prev);
    return st;
}
