/* The raw ops of include/ojas/ops.h as functions of ojas._C, one wrapper per
 * op with the C argument order (ojas/_ops.py and ojas/nn/functional.py give
 * them torch's names and keyword signatures). Argument codes of parse():
 *   T tensor          t tensor or None (NULL)     d float     i int
 *   l int64           b bool (truthiness)         y dtype     r reduction int
 *   D dims: None (all) or int or sequence of ints -> (int n, int *dims)
 *   S int64 sequence (or one int) -> (int n, int64_t *v)
 *   P pair: int or two ints -> int64_t[2]; Q like P or None -> NULL
 * The first tensor argument's engine receives and reports errors. */
#include <math.h>

#include "ojas_py.h"

typedef struct dims_arg {
    int n;
    int v[OJ_MAX_RANK];
    int64_t w[OJ_MAX_RANK];
    bool null;
} dims_arg;

static EngineObject *first_engine;

static int parse(PyObject *const *a, Py_ssize_t n, const char *name, const char *fmt, ...) {
    Py_ssize_t want = (Py_ssize_t)strlen(fmt);
    if (n != want) {
        PyErr_Format(PyExc_TypeError, "%s: %zd arguments given, %zd expected", name, n, want);
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    first_engine = NULL;
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *o = a[i];
        switch (fmt[i]) {
        case 'T':
        case 't': {
            oj_tensor **out = va_arg(ap, oj_tensor **);
            if (fmt[i] == 't' && o == Py_None) {
                *out = NULL;
                break;
            }
            char what[64];
            snprintf(what, sizeof what, "%s: argument %zd", name, i + 1);
            *out = ojpy_tensor_of(o, what);
            if (*out == NULL) ok = 0;
            else if (first_engine == NULL) first_engine = ((TensorObject *)o)->eng;
            break;
        }
        case 'd': {
            double *out = va_arg(ap, double *);
            *out = o == Py_None ? NAN : PyFloat_AsDouble(o);
            if (*out == -1.0 && PyErr_Occurred()) ok = 0;
            break;
        }
        case 'i': {
            int *out = va_arg(ap, int *);
            long v = PyLong_AsLong(o);
            if (v == -1 && PyErr_Occurred()) ok = 0;
            else if (v < INT32_MIN || v > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s: argument %zd out of int range", name, i + 1);
                ok = 0;
            }
            *out = (int)v;
            break;
        }
        case 'l': {
            int64_t *out = va_arg(ap, int64_t *);
            *out = PyLong_AsLongLong(o);
            if (*out == -1 && PyErr_Occurred()) ok = 0;
            break;
        }
        case 'b': {
            bool *out = va_arg(ap, bool *);
            int v = PyObject_IsTrue(o);
            if (v < 0) ok = 0;
            *out = v > 0;
            break;
        }
        case 'y': {
            oj_dtype *out = va_arg(ap, oj_dtype *);
            int v = ojpy_dtype_arg(o);
            if (v < 0) ok = 0;
            *out = (oj_dtype)v;
            break;
        }
        case 'r': {
            oj_reduction *out = va_arg(ap, oj_reduction *);
            long v = PyLong_AsLong(o);
            if (v == -1 && PyErr_Occurred()) ok = 0;
            *out = (oj_reduction)v;
            break;
        }
        case 'D':
        case 'S':
        case 'P':
        case 'Q': {
            dims_arg *out = va_arg(ap, dims_arg *);
            out->null = o == Py_None;
            out->n = 0;
            if (out->null) {
                if (fmt[i] == 'S' || fmt[i] == 'P') {
                    PyErr_Format(PyExc_TypeError, "%s: argument %zd must not be None", name, i + 1);
                    ok = 0;
                }
                break;
            }
            int r = ojpy_shape_arg(o, out->w, name);
            if (r < 0) {
                ok = 0;
                break;
            }
            if (fmt[i] == 'P' || fmt[i] == 'Q') {
                if (r == 1 && PyLong_Check(o)) out->w[1] = out->w[0];
                else if (r != 2) {
                    PyErr_Format(PyExc_TypeError, "%s: argument %zd must be an int or a pair", name,
                                 i + 1);
                    ok = 0;
                }
                r = 2;
            }
            out->n = r;
            for (int d = 0; d < r; d++) out->v[d] = (int)out->w[d];
            break;
        }
        default:
            PyErr_Format(PyExc_SystemError, "%s: bad format code", name);
            ok = 0;
        }
    }
    va_end(ap);
    if (ok && first_engine == NULL) {
        PyErr_Format(PyExc_SystemError, "%s: no tensor argument", name);
        ok = 0;
    }
    return ok;
}

#define FN(name) static PyObject *py_##name(PyObject *m, PyObject *const *a, Py_ssize_t n)
#define RET(expr)                                   \
    do {                                            \
        EngineObject *e_ = first_engine;            \
        return ojpy_wrap((expr), e_);               \
    } while (0)
#define STATUS(expr)                                                      \
    do {                                                                  \
        EngineObject *e_ = first_engine;                                  \
        if ((expr) != OJ_OK) return ojpy_raise_engine(e_->eng, __func__); \
        Py_INCREF(a[0]);                                                  \
        return a[0];                                                      \
    } while (0)
#define DIMS(d) ((d).null ? 0 : (d).n), ((d).null ? NULL : (d).v)
#define PTR2(d) ((d).null ? NULL : (d).w)

#define UNARY(name)                                     \
    FN(name) {                                          \
        oj_tensor *x;                                   \
        if (!parse(a, n, #name, "T", &x)) return NULL;  \
        RET(oj_##name(x));                              \
    }
#define UNARY_D(name)                                        \
    FN(name) {                                               \
        oj_tensor *x;                                        \
        double p;                                            \
        if (!parse(a, n, #name, "Td", &x, &p)) return NULL;  \
        RET(oj_##name(x, p));                                \
    }
#define UNARY_DD(name)                                              \
    FN(name) {                                                      \
        oj_tensor *x;                                               \
        double p, q;                                                \
        if (!parse(a, n, #name, "Tdd", &x, &p, &q)) return NULL;   \
        RET(oj_##name(x, p, q));                                    \
    }
#define UNARY_I(name)                                        \
    FN(name) {                                               \
        oj_tensor *x;                                        \
        int d;                                               \
        if (!parse(a, n, #name, "Ti", &x, &d)) return NULL;  \
        RET(oj_##name(x, d));                                \
    }
#define UNARY_L(name)                                        \
    FN(name) {                                               \
        oj_tensor *x;                                        \
        int64_t v;                                           \
        if (!parse(a, n, #name, "Tl", &x, &v)) return NULL;  \
        RET(oj_##name(x, v));                                \
    }
#define BINARY(name)                                          \
    FN(name) {                                                \
        oj_tensor *x, *y;                                     \
        if (!parse(a, n, #name, "TT", &x, &y)) return NULL;   \
        RET(oj_##name(x, y));                                 \
    }
#define REDUCE(name)                                                   \
    FN(name) {                                                         \
        oj_tensor *x;                                                  \
        dims_arg d;                                                    \
        bool k;                                                        \
        if (!parse(a, n, #name, "TDb", &x, &d, &k)) return NULL;       \
        RET(oj_##name(x, DIMS(d), k));                                 \
    }
#define LOSS2(name)                                                   \
    FN(name) {                                                        \
        oj_tensor *x, *y;                                             \
        oj_reduction r;                                               \
        if (!parse(a, n, #name, "TTr", &x, &y, &r)) return NULL;      \
        RET(oj_##name(x, y, r));                                      \
    }

#define UNARY_IB(name)                                               \
    FN(name) {                                                       \
        oj_tensor *x;                                                \
        int d;                                                       \
        bool k;                                                      \
        if (!parse(a, n, #name, "Tib", &x, &d, &k)) return NULL;     \
        RET(oj_##name(x, d, k));                                     \
    }
#define UNARY_S(name)                                        \
    FN(name) {                                               \
        oj_tensor *x;                                        \
        dims_arg s;                                          \
        if (!parse(a, n, #name, "TS", &x, &s)) return NULL;  \
        RET(oj_##name(x, s.n, s.w));                         \
    }
#define INPLACE_T(name)                                       \
    FN(name) {                                                \
        oj_tensor *x, *y;                                     \
        if (!parse(a, n, #name, "TT", &x, &y)) return NULL;   \
        STATUS(oj_##name(x, y));                              \
    }
#define INPLACE_D(name)                                       \
    FN(name) {                                                \
        oj_tensor *x;                                         \
        double v;                                             \
        if (!parse(a, n, #name, "Td", &x, &v)) return NULL;   \
        STATUS(oj_##name(x, v));                              \
    }
#define VARIANCE(name)                                                  \
    FN(name) {                                                          \
        oj_tensor *x;                                                   \
        dims_arg d;                                                     \
        double c;                                                       \
        bool k;                                                         \
        if (!parse(a, n, #name, "TDdb", &x, &d, &c, &k)) return NULL;   \
        RET(oj_##name(x, DIMS(d), c, k));                               \
    }
/* elementwise */
UNARY(neg) UNARY(abs) UNARY(exp) UNARY(log) UNARY(log1p) UNARY(sqrt) UNARY(rsqrt) UNARY(square)
UNARY(sign) UNARY(reciprocal) UNARY(sin) UNARY(cos) UNARY(relu) UNARY(gelu) UNARY(gelu_tanh)
UNARY(silu) UNARY(sigmoid) UNARY(tanh) UNARY(mish) UNARY(logical_not) UNARY(isnan)
UNARY(isfinite) UNARY(squeeze_all) UNARY(clone) UNARY(contiguous) UNARY(detach) UNARY(sum_all)
UNARY(mean_all)
UNARY_D(leaky_relu) UNARY_D(elu) UNARY_D(pow_scalar) UNARY_D(add_scalar) UNARY_D(mul_scalar)
UNARY_DD(softplus) UNARY_DD(clamp) UNARY_DD(affine)
BINARY(add) BINARY(sub) BINARY(mul) BINARY(div) BINARY(pow) BINARY(maximum) BINARY(minimum)
BINARY(eq) BINARY(ne) BINARY(lt) BINARY(le) BINARY(gt) BINARY(ge) BINARY(logical_and)
BINARY(logical_or) BINARY(logical_xor) BINARY(matmul) BINARY(bmm) BINARY(embedding)

FN(where) {
    oj_tensor *c, *x, *y;
    if (!parse(a, n, "where", "TTT", &c, &x, &y)) return NULL;
    RET(oj_where(c, x, y));
}
FN(cast) {
    oj_tensor *x;
    oj_dtype dt;
    if (!parse(a, n, "cast", "Ty", &x, &dt)) return NULL;
    RET(oj_cast(x, dt));
}
INPLACE_T(add_) INPLACE_D(mul_scalar_) INPLACE_T(copy_) INPLACE_D(fill_)
FN(zero_grad) {
    oj_tensor *x;
    if (!parse(a, n, "zero_grad", "T", &x)) return NULL;
    oj_zero_grad(x);
    Py_RETURN_NONE;
}

/* reductions */
REDUCE(sum) REDUCE(mean) REDUCE(prod) REDUCE(amax) REDUCE(amin) REDUCE(any) REDUCE(all)
REDUCE(logsumexp)
VARIANCE(var) VARIANCE(std)
FN(norm) {
    oj_tensor *x;
    dims_arg d;
    double p;
    bool k;
    if (!parse(a, n, "norm", "TdDb", &x, &p, &d, &k)) return NULL;
    RET(oj_norm(x, p, DIMS(d), k));
}
/* max(x, dim, keepdim[, indices]): (values, indices), indices None when the
 * optional fourth argument is false (oj_max with out_indices NULL). */
static PyObject *max_min(PyObject *const *a, Py_ssize_t n, bool is_max) {
    oj_tensor *x, *idx = NULL;
    int d;
    bool k, want = true;
    const char *name = is_max ? "max" : "min";
    if (n == 4 ? !parse(a, n, name, "Tibb", &x, &d, &k, &want)
               : !parse(a, n, name, "Tib", &x, &d, &k))
        return NULL;
    EngineObject *e = first_engine;
    oj_tensor **pidx = want ? &idx : NULL;
    oj_tensor *v = is_max ? oj_max(x, d, k, pidx) : oj_min(x, d, k, pidx);
    if (v == NULL) return ojpy_raise_engine(e->eng, name);
    PyObject *pv = ojpy_wrap(v, e);
    if (pv != NULL && !want) return Py_BuildValue("(NO)", pv, Py_None);
    PyObject *pi = pv ? ojpy_wrap(idx, e) : (oj_release(idx), NULL);
    if (pi == NULL) {
        Py_XDECREF(pv);
        return NULL;
    }
    return Py_BuildValue("(NN)", pv, pi);
}
FN(max) { return max_min(a, n, true); }
FN(min) { return max_min(a, n, false); }
UNARY_IB(argmax) UNARY_IB(argmin)
UNARY_I(cumsum) UNARY_I(softmax) UNARY_I(log_softmax) UNARY_I(squeeze) UNARY_I(unsqueeze)

/* views */
UNARY_S(reshape) UNARY_S(view) UNARY_S(expand)
FN(permute) {
    oj_tensor *x;
    dims_arg s;
    if (!parse(a, n, "permute", "TS", &x, &s)) return NULL;
    RET(oj_permute(x, s.n, s.v));
}
FN(transpose) {
    oj_tensor *x;
    int d0, d1;
    if (!parse(a, n, "transpose", "Tii", &x, &d0, &d1)) return NULL;
    RET(oj_transpose(x, d0, d1));
}
FN(narrow) {
    oj_tensor *x;
    int d;
    int64_t s, l;
    if (!parse(a, n, "narrow", "Till", &x, &d, &s, &l)) return NULL;
    RET(oj_narrow(x, d, s, l));
}
FN(slice) {
    oj_tensor *x;
    int d;
    int64_t s, e, st;
    if (!parse(a, n, "slice", "Tilll", &x, &d, &s, &e, &st)) return NULL;
    RET(oj_slice(x, d, s, e, st));
}
FN(flatten) {
    oj_tensor *x;
    int s, e;
    if (!parse(a, n, "flatten", "Tii", &x, &s, &e)) return NULL;
    RET(oj_flatten(x, s, e));
}
FN(select) {
    oj_tensor *x;
    int d;
    int64_t i;
    if (!parse(a, n, "select", "Til", &x, &d, &i)) return NULL;
    RET(oj_select(x, d, i));
}

/* linear algebra */
FN(linear) {
    oj_tensor *x, *w, *b;
    if (!parse(a, n, "linear", "TTt", &x, &w, &b)) return NULL;
    RET(oj_linear(x, w, b));
}
FN(gelu_linear) {
    oj_tensor *x, *w, *b;
    bool ap;
    if (!parse(a, n, "gelu_linear", "TTtb", &x, &w, &b, &ap)) return NULL;
    RET(oj_gelu_linear(x, w, b, ap));
}
FN(swiglu_linear) {
    oj_tensor *g, *u, *w, *b;
    if (!parse(a, n, "swiglu_linear", "TTTt", &g, &u, &w, &b)) return NULL;
    RET(oj_swiglu_linear(g, u, w, b));
}
FN(addmm) {
    oj_tensor *i, *x, *y;
    double be, al;
    if (!parse(a, n, "addmm", "TTTdd", &i, &x, &y, &be, &al)) return NULL;
    RET(oj_addmm(i, x, y, be, al));
}

/* nn */
FN(layer_norm) {
    oj_tensor *x, *w, *b;
    double eps;
    if (!parse(a, n, "layer_norm", "Tttd", &x, &w, &b, &eps)) return NULL;
    RET(oj_layer_norm(x, w, b, eps));
}
FN(rms_norm) {
    oj_tensor *x, *w;
    double eps;
    if (!parse(a, n, "rms_norm", "Ttd", &x, &w, &eps)) return NULL;
    RET(oj_rms_norm(x, w, eps));
}
static PyObject *pair_or_raise(oj_tensor *r, oj_tensor *s, EngineObject *e, const char *name) {
    if (r == NULL) return ojpy_raise_engine(e->eng, name);
    PyObject *pr = ojpy_wrap(r, e);
    PyObject *ps = pr ? ojpy_wrap(s, e) : (oj_release(s), NULL);
    if (ps == NULL) {
        Py_XDECREF(pr);
        return NULL;
    }
    return Py_BuildValue("(NN)", pr, ps);
}
FN(add_layer_norm) {
    oj_tensor *x, *r, *w, *b, *s = NULL;
    double eps;
    if (!parse(a, n, "add_layer_norm", "TTttd", &x, &r, &w, &b, &eps)) return NULL;
    EngineObject *e = first_engine;
    oj_tensor *out = oj_add_layer_norm(x, r, w, b, eps, &s);
    return pair_or_raise(out, s, e, "add_layer_norm");
}
FN(add_rms_norm) {
    oj_tensor *x, *r, *w, *s = NULL;
    double eps;
    if (!parse(a, n, "add_rms_norm", "TTtd", &x, &r, &w, &eps)) return NULL;
    EngineObject *e = first_engine;
    oj_tensor *out = oj_add_rms_norm(x, r, w, eps, &s);
    return pair_or_raise(out, s, e, "add_rms_norm");
}
FN(cross_entropy) {
    oj_tensor *x, *t;
    int64_t ig;
    double ls;
    oj_reduction r;
    if (!parse(a, n, "cross_entropy", "TTldr", &x, &t, &ig, &ls, &r)) return NULL;
    RET(oj_cross_entropy(x, t, ig, ls, r));
}
FN(nll_loss) {
    oj_tensor *x, *t;
    int64_t ig;
    oj_reduction r;
    if (!parse(a, n, "nll_loss", "TTlr", &x, &t, &ig, &r)) return NULL;
    RET(oj_nll_loss(x, t, ig, r));
}
FN(linear_cross_entropy) {
    oj_tensor *x, *w, *t;
    int64_t ig;
    double ls;
    oj_reduction r;
    if (!parse(a, n, "linear_cross_entropy", "TTTldr", &x, &w, &t, &ig, &ls, &r)) return NULL;
    RET(oj_linear_cross_entropy(x, w, t, ig, ls, r));
}
FN(scaled_dot_product_attention) {
    oj_tensor *q, *k, *v, *mask;
    bool causal;
    double scale;
    if (!parse(a, n, "scaled_dot_product_attention", "TTTtbd", &q, &k, &v, &mask, &causal, &scale))
        return NULL;
    RET(oj_scaled_dot_product_attention(q, k, v, mask, causal, scale));
}
FN(rotary_embedding) {
    oj_tensor *x;
    int64_t off;
    double th;
    if (!parse(a, n, "rotary_embedding", "Tld", &x, &off, &th)) return NULL;
    RET(oj_rotary_embedding(x, off, th));
}
FN(rotary_embedding_at) {
    oj_tensor *x, *p;
    double th;
    if (!parse(a, n, "rotary_embedding_at", "TTd", &x, &p, &th)) return NULL;
    RET(oj_rotary_embedding_at(x, p, th));
}
FN(rms_norm_rotary) {
    oj_tensor *x, *w;
    double eps, th;
    int64_t off;
    if (!parse(a, n, "rms_norm_rotary", "Ttdld", &x, &w, &eps, &off, &th)) return NULL;
    RET(oj_rms_norm_rotary(x, w, eps, off, th));
}
FN(dropout) {
    oj_tensor *x;
    double p;
    bool tr;
    if (!parse(a, n, "dropout", "Tdb", &x, &p, &tr)) return NULL;
    RET(oj_dropout(x, p, tr));
}
LOSS2(mse_loss) LOSS2(l1_loss) LOSS2(binary_cross_entropy) LOSS2(binary_cross_entropy_with_logits)
FN(smooth_l1_loss) {
    oj_tensor *x, *y;
    double beta;
    oj_reduction r;
    if (!parse(a, n, "smooth_l1_loss", "TTdr", &x, &y, &beta, &r)) return NULL;
    RET(oj_smooth_l1_loss(x, y, beta, r));
}

/* shape and indexing */
static PyObject *join(PyObject *const *a, Py_ssize_t n, bool stack) {
    const char *name = stack ? "stack" : "cat";
    if (n != 2) {
        PyErr_Format(PyExc_TypeError, "%s: expected (tensors, dim)", name);
        return NULL;
    }
    int dim = (int)PyLong_AsLong(a[1]);
    if (dim == -1 && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(a[0], "tensors must be a sequence of tensors");
    if (seq == NULL) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k == 0) {
        Py_DECREF(seq);
        return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "cat/stack: expected a non-empty list");
    }
    oj_tensor **ts = PyMem_Malloc(sizeof(oj_tensor *) * (size_t)k);
    PyObject *res = NULL;
    if (ts == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        ts[i] = ojpy_tensor_of(PySequence_Fast_GET_ITEM(seq, i), "tensors[i]");
        if (ts[i] == NULL) goto out;
    }
    EngineObject *e = ((TensorObject *)PySequence_Fast_GET_ITEM(seq, 0))->eng;
    res = ojpy_wrap(stack ? oj_stack((int)k, ts, dim) : oj_cat((int)k, ts, dim), e);
out:
    PyMem_Free(ts);
    Py_DECREF(seq);
    return res;
}
FN(cat) { return join(a, n, false); }
FN(stack) { return join(a, n, true); }

static PyObject *pieces(int count, oj_tensor **outs, EngineObject *e, const char *name) {
    if (count < 0) return ojpy_raise_engine(e->eng, name);
    PyObject *list = PyList_New(count);
    for (int i = 0; i < count; i++) {
        PyObject *p = list ? ojpy_wrap(outs[i], e) : NULL;
        if (p == NULL) {
            for (int j = i + (list ? 1 : 0); j < count; j++) oj_release(outs[j]);
            Py_XDECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, p);
    }
    return list;
}
FN(split) {
    oj_tensor *x;
    int64_t s;
    int d;
    if (!parse(a, n, "split", "Tli", &x, &s, &d)) return NULL;
    EngineObject *e = first_engine;
    int cnt = oj_split(x, s, d, 0, NULL);
    if (cnt < 0) return ojpy_raise_engine(e->eng, "split");
    oj_tensor **outs = PyMem_Calloc((size_t)cnt + 1, sizeof *outs);
    if (outs == NULL) return PyErr_NoMemory();
    PyObject *r = pieces(oj_split(x, s, d, cnt, outs), outs, e, "split");
    PyMem_Free(outs);
    return r;
}
FN(split_sizes) {
    oj_tensor *x;
    dims_arg s;
    int d;
    if (!parse(a, n, "split_sizes", "TSi", &x, &s, &d)) return NULL;
    EngineObject *e = first_engine;
    oj_tensor *outs[OJ_MAX_RANK];
    return pieces(oj_split_sizes(x, s.n, s.w, d, outs), outs, e, "split_sizes");
}
FN(chunk) {
    oj_tensor *x;
    int c, d;
    if (!parse(a, n, "chunk", "Tii", &x, &c, &d)) return NULL;
    EngineObject *e = first_engine;
    if (c <= 0) return ojpy_raise_status(OJ_ERR_INVALID_ARGUMENT, "chunk: chunks must be > 0");
    oj_tensor **outs = PyMem_Calloc((size_t)c, sizeof *outs);
    if (outs == NULL) return PyErr_NoMemory();
    PyObject *r = pieces(oj_chunk(x, c, d, c, outs), outs, e, "chunk");
    PyMem_Free(outs);
    return r;
}
FN(flip) {
    oj_tensor *x;
    dims_arg d;
    if (!parse(a, n, "flip", "TS", &x, &d)) return NULL;
    RET(oj_flip(x, d.n, d.v));
}
FN(pad) {
    oj_tensor *x;
    dims_arg p;
    double v;
    if (!parse(a, n, "pad", "TSd", &x, &p, &v)) return NULL;
    RET(oj_pad(x, p.n, p.w, v));
}
FN(gather) {
    oj_tensor *x, *i;
    int d;
    if (!parse(a, n, "gather", "TiT", &x, &d, &i)) return NULL;
    RET(oj_gather(x, d, i));
}
FN(scatter_add) {
    oj_tensor *x, *i, *s;
    int d;
    if (!parse(a, n, "scatter_add", "TiTT", &x, &d, &i, &s)) return NULL;
    RET(oj_scatter_add(x, d, i, s));
}
FN(index_select) {
    oj_tensor *x, *i;
    int d;
    if (!parse(a, n, "index_select", "TiT", &x, &d, &i)) return NULL;
    RET(oj_index_select(x, d, i));
}
FN(index_add) {
    oj_tensor *x, *i, *s;
    int d;
    double al;
    if (!parse(a, n, "index_add", "TiTTd", &x, &d, &i, &s, &al)) return NULL;
    RET(oj_index_add(x, d, i, s, al));
}
FN(index_copy_) {
    oj_tensor *x, *i, *s;
    int d;
    if (!parse(a, n, "index_copy_", "TiTT", &x, &d, &i, &s)) return NULL;
    STATUS(oj_index_copy_(x, d, i, s));
}
FN(masked_fill) {
    oj_tensor *x, *mk;
    double v;
    if (!parse(a, n, "masked_fill", "TTd", &x, &mk, &v)) return NULL;
    RET(oj_masked_fill(x, mk, v));
}
UNARY_L(tril) UNARY_L(triu) UNARY_L(one_hot)
FN(repeat) {
    oj_tensor *x;
    dims_arg r;
    if (!parse(a, n, "repeat", "TS", &x, &r)) return NULL;
    RET(oj_repeat(x, r.n, r.w));
}

/* convolution and pooling */
FN(unfold) {
    oj_tensor *x;
    dims_arg k, d, p, s;
    if (!parse(a, n, "unfold", "TPPPP", &x, &k, &d, &p, &s)) return NULL;
    RET(oj_unfold(x, k.w, d.w, p.w, s.w));
}
FN(conv2d) {
    oj_tensor *x, *w, *b;
    dims_arg s, p, d;
    int g;
    if (!parse(a, n, "conv2d", "TTtPPPi", &x, &w, &b, &s, &p, &d, &g)) return NULL;
    RET(oj_conv2d(x, w, b, s.w, p.w, d.w, g));
}
FN(conv1d) {
    oj_tensor *x, *w, *b;
    int64_t s, p, d;
    int g;
    if (!parse(a, n, "conv1d", "TTtllli", &x, &w, &b, &s, &p, &d, &g)) return NULL;
    RET(oj_conv1d(x, w, b, s, p, d, g));
}
FN(max_pool2d) {
    oj_tensor *x;
    dims_arg k, s, p;
    if (!parse(a, n, "max_pool2d", "TPQP", &x, &k, &s, &p)) return NULL;
    RET(oj_max_pool2d(x, k.w, PTR2(s), p.w));
}
FN(avg_pool2d) {
    oj_tensor *x;
    dims_arg k, s, p;
    bool cip;
    if (!parse(a, n, "avg_pool2d", "TPQPb", &x, &k, &s, &p, &cip)) return NULL;
    RET(oj_avg_pool2d(x, k.w, PTR2(s), p.w, cip));
}
FN(adaptive_avg_pool2d) {
    oj_tensor *x;
    int64_t h, w;
    if (!parse(a, n, "adaptive_avg_pool2d", "Tll", &x, &h, &w)) return NULL;
    RET(oj_adaptive_avg_pool2d(x, h, w));
}
FN(upsample_nearest2d) {
    oj_tensor *x;
    int64_t h, w;
    if (!parse(a, n, "upsample_nearest2d", "Tll", &x, &h, &w)) return NULL;
    RET(oj_upsample_nearest2d(x, h, w));
}
FN(batch_norm) {
    oj_tensor *x, *rm, *rv, *w, *b;
    bool tr;
    double mo, eps;
    if (!parse(a, n, "batch_norm", "Tttttbdd", &x, &rm, &rv, &w, &b, &tr, &mo, &eps)) return NULL;
    RET(oj_batch_norm(x, rm, rv, w, b, tr, mo, eps));
}

#define E(name) {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL, NULL}
PyMethodDef ojpy_op_methods[] = {
    E(neg), E(abs), E(exp), E(log), E(log1p), E(sqrt), E(rsqrt), E(square), E(sign),
    E(reciprocal), E(sin), E(cos), E(relu), E(gelu), E(gelu_tanh), E(silu), E(sigmoid), E(tanh),
    E(mish), E(logical_not), E(isnan), E(isfinite), E(squeeze_all), E(clone), E(contiguous),
    E(detach), E(sum_all), E(mean_all), E(leaky_relu), E(elu), E(pow_scalar), E(add_scalar),
    E(mul_scalar), E(softplus), E(clamp), E(affine), E(add), E(sub), E(mul), E(div), E(pow),
    E(maximum), E(minimum), E(eq), E(ne), E(lt), E(le), E(gt), E(ge), E(logical_and),
    E(logical_or), E(logical_xor), E(matmul), E(bmm), E(embedding), E(where), E(cast), E(add_),
    E(mul_scalar_), E(copy_), E(fill_), E(zero_grad), E(sum), E(mean), E(prod), E(amax), E(amin),
    E(any), E(all), E(logsumexp), E(var), E(std), E(norm), E(max), E(min), E(argmax), E(argmin),
    E(cumsum), E(softmax), E(log_softmax), E(squeeze), E(unsqueeze), E(reshape), E(view),
    E(expand), E(permute), E(transpose), E(narrow), E(slice), E(flatten), E(select), E(linear),
    E(gelu_linear), E(swiglu_linear), E(addmm), E(layer_norm), E(rms_norm), E(add_layer_norm),
    E(add_rms_norm), E(cross_entropy), E(nll_loss), E(linear_cross_entropy),
    E(scaled_dot_product_attention), E(rotary_embedding), E(rotary_embedding_at),
    E(rms_norm_rotary), E(dropout), E(mse_loss), E(l1_loss), E(binary_cross_entropy),
    E(binary_cross_entropy_with_logits), E(smooth_l1_loss), E(cat), E(stack), E(split),
    E(split_sizes), E(chunk), E(flip), E(pad), E(gather), E(scatter_add), E(index_select),
    E(index_add), E(index_copy_), E(masked_fill), E(tril), E(triu), E(one_hot), E(repeat),
    E(unfold), E(conv2d), E(conv1d), E(max_pool2d), E(avg_pool2d), E(adaptive_avg_pool2d),
    E(upsample_nearest2d), E(batch_norm),
    {NULL},
};
