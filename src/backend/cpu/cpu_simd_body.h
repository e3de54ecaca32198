/* The vector implementation of the oj_simd entries, included by cpu_simd.c
 * once per SIMD level after it defines (see there):
 *   V VL M NAME(x)           vector type, lanes, tail-mask type, name suffix
 *   v_* primitives           load/store (masked), arithmetic, compares,
 *                            blends, horizontal sum/max, integer exponent ops
 * No include guard: included twice. */

/* ---------------------------------------------------------------- exp */

/* The shared core of exp on a clamped argument xc: n = round(xc / ln 2)
 * into *n_out, and p = exp(xc - n ln 2) (ln 2 in two parts, degree 6). */
static inline V NAME(vexp_poly)(V xc, V *n_out) {
    V n = v_round(v_mul(xc, v_set1(1.44269504088896341f)));
    V r = v_fnmadd(n, v_set1(0.693359375f), xc);
    r = v_fnmadd(n, v_set1(-2.12194440e-4f), r);
    V z = v_mul(r, r);
    V p = v_fmadd(v_set1(1.9875691500e-4f), r, v_set1(1.3981999507e-3f));
    p = v_fmadd(p, r, v_set1(8.3334519073e-3f));
    p = v_fmadd(p, r, v_set1(4.1665795894e-2f));
    p = v_fmadd(p, r, v_set1(1.6666665459e-1f));
    p = v_fmadd(p, r, v_set1(5.0000001201e-1f));
    p = v_fmadd(p, z, r);
    *n_out = n;
    return v_add(p, v_set1(1.0f));
}

/* Below lo the result is 0: for those lanes (and NaN, fixed at the end)
 * the second scale factor is 0 instead of 2^n2, so p 2^n1 (normal) times
 * it is an exact 0. Scaling them by 2^n2 and blending 0 in afterwards (as
 * this once did) made every such lane build a subnormal first, which the
 * CPU does in microcode, 10-20x slower; now only lanes whose result is
 * subnormal, x in [lo, -87.34), take that path. */
static inline V NAME(vexp)(V x) {
    const V hi = v_set1(88.72283935546875f), lo = v_set1(-103.97208404541015625f);
    V xc = v_min(v_max(x, lo), hi); /* NaN becomes lo here; fixed at the end */
    V n;
    V p = NAME(vexp_poly)(xc, &n);
    VI ni = v_cvt_i(n);
    VI n1 = v_i_srai1(ni), n2 = v_i_sub(ni, n1);
    V s2 = v_blend(v_nge(x, lo), v_pow2(n2), v_zero());
    V y = v_mul(v_mul(p, v_pow2(n1)), s2);
    y = v_blend(v_gt(x, hi), y, v_set1(INFINITY));
    return v_blend(v_isnan(x), y, x);
}

/* exp(x) for x <= 0 (or NaN): what sigmoid, tanh, softmax and the
 * attention need. With AVX-512's scalef (p 2^n in one correctly rounded
 * step, subnormals included: the same bits as the two steps of vexp) the
 * special cases need one blend: below lo (and for NaN) p is replaced by 0,
 * so the scaled result is an exact 0 (NaN stays NaN through n) instead of
 * an underflow, which is as slow as making a subnormal. Bit for bit vexp
 * on x <= 0, at about half the instructions, which is what keeps gelu and
 * silu at memory speed. */
#ifdef v_scalef
static inline V NAME(vexp_neg)(V x) {
    V n;
    V p = NAME(vexp_poly)(v_max(v_set1(-110.0f), x), &n);
    p = v_blend(v_nge(x, v_set1(-103.97208404541015625f)), p, v_zero());
    return v_scalef(p, n);
}
#else
static inline V NAME(vexp_neg)(V x) { return NAME(vexp)(x); }
#endif

/* 1 / (1 + exp(-x)), written as e / (1 + e) with e = exp(x) for x < 0 so
 * that neither form overflows or loses small results. For x >= 0, e only
 * enters through 1 + e, which is exactly 1 once e < 2^-25 (x > 17.33):
 * the exp argument is clamped at -18 there, so a large positive x never
 * builds a subnormal e (same bits, none of the CPU's slow path). */
static inline V NAME(vsigmoid)(V x) {
    /* x < 0: x; x >= 0: max(-x, -18); NaN stays NaN (max and min return
     * their second operand when one is NaN) */
    V t = v_min(v_max(v_set1(-18.0f), v_neg(x)), x);
    V e = NAME(vexp_neg)(t);
    V s = v_recip(v_add(v_set1(1.0f), e));
    return v_blend(v_ge(x, v_zero()), v_mul(e, s), s);
}

/* tanh: Cephes tanhf (odd polynomial below |x| 0.625, else
 * (1 - e) / (1 + e) with e = exp(-2|x|), sign restored). Beyond |x| = 9,
 * e < 2^-25 and the quotient is exactly 1, so |x| is clamped at 9 before
 * the exp (same bits; no subnormal e, which the CPU makes in microcode,
 * for |x| >= 44). min(9, NaN) is NaN. */
static inline V NAME(vtanh)(V x) {
    V ax = v_abs(x);
    V z = v_mul(x, x);
    V p = v_fmadd(v_set1(-5.70498872745e-3f), z, v_set1(2.06390887954e-2f));
    p = v_fmadd(p, z, v_set1(-5.37397155531e-2f));
    p = v_fmadd(p, z, v_set1(1.33314422036e-1f));
    p = v_fmadd(p, z, v_set1(-3.33332819422e-1f));
    V small = v_fmadd(v_mul(p, z), x, x);
    V e = NAME(vexp_neg)(v_mul(v_set1(-2.0f), v_min(v_set1(9.0f), ax)));
    V t = v_mul(v_sub(v_set1(1.0f), e), v_recip(v_add(v_set1(1.0f), e)));
    V big = v_copysign(t, x);
    return v_blend(v_lt(ax, v_set1(0.625f)), big, small);
}

/* gelu (tanh form): 0.5 x (1 + tanh(u)) = x sigmoid(2u),
 * u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline V NAME(vgelu_s)(V x) {
    const float k2 = 2.0f * 0.7978845608028654f;
    V x2 = v_mul(x, x);
    V u2 = v_mul(x, v_fmadd(v_set1(k2 * 0.044715f), x2, v_set1(k2)));
    return NAME(vsigmoid)(u2);
}

/* m Phi(x), Phi the standard normal CDF (gelu = x Phi(x)); *e_out =
 * exp(-x^2 / 2). With z = |x| / sqrt 2 and t = 1 / (1 + z / 2):
 * erfc(z) = t H(t) exp(-z^2), H of degree 10 (the form of Numerical
 * Recipes' erfcc; a least-squares fit made for f32 over z in [0, 10.1],
 * 4e-9 relative), and Phi = erfc(z) / 2 for x < 0, 1 - erfc(z) / 2 for
 * x >= 0: no cancellation on either side (1 + erf(x / sqrt 2), PyTorch's
 * form, is 0 from x = -5.6 on in f32), within 8 ulp of float64 over
 * [-20, 20]. z^2 = x^2 / 2 is taken exactly as the sum of two floats (a
 * fused multiply-add gives the rounding error of x^2) and the small part
 * applied as exp(-hi - lo) = exp(-hi) (1 - lo), and for x < 0 the exp
 * factor multiplies last, so the left tail keeps its relative accuracy
 * down to the subnormal range. |x| is clamped at 20 (Phi is 0 or 1 in f32
 * long before), which keeps t, x^2 and its error finite; NaN flows
 * through. */
static inline V NAME(vphi)(V x, V m, V *e_out) {
    const V one = v_set1(1.0f), half = v_set1(0.5f);
    V ax = v_min(v_set1(20.0f), v_abs(x));
    V s = v_mul(ax, ax);
    V slo = v_fmadd(ax, ax, v_neg(s));
    V e = NAME(vexp_neg)(v_mul(v_set1(-0.5f), s));
    e = v_fnmadd(e, v_mul(half, slo), e);
    *e_out = e;
    V t = v_recip(v_fmadd(v_set1(0.35355339059327376f), ax, one));
    V h = v_fmadd(v_set1(3.5917875567e-02f), t, v_set1(-1.9191202248e-01f));
    h = v_fmadd(h, t, v_set1(3.8365040826e-01f));
    h = v_fmadd(h, t, v_set1(-2.9282947596e-01f));
    h = v_fmadd(h, t, v_set1(-1.8998183169e-02f));
    h = v_fmadd(h, t, v_set1(3.3629097554e-02f));
    h = v_fmadd(h, t, v_set1(5.5581876715e-02f));
    h = v_fmadd(h, t, v_set1(1.8541413086e-01f));
    h = v_fmadd(h, t, v_set1(2.4520779260e-01f));
    h = v_fmadd(h, t, v_set1(2.8224989128e-01f));
    h = v_fmadd(h, t, v_set1(2.8208861228e-01f));
    V k = v_mul(v_mul(half, t), h); /* erfc(z) / 2 = k e */
    V left = v_mul(v_mul(m, k), e), right = v_mul(m, v_fnmadd(k, e, one));
    return v_blend(v_lt(x, v_zero()), right, left);
}

static inline V NAME(vunary)(oj_simd_fn f, V x, V a, V b) {
    switch (f) {
    case OJ_SF_EXP: return NAME(vexp)(x);
    case OJ_SF_SIGMOID: return NAME(vsigmoid)(x);
    case OJ_SF_SILU: return v_mul(x, NAME(vsigmoid)(x));
    case OJ_SF_GELU_TANH: return v_mul(x, NAME(vgelu_s)(x));
    case OJ_SF_TANH: return NAME(vtanh)(x);
    case OJ_SF_GELU: {
        V e;
        return NAME(vphi)(x, x, &e);
    }
    case OJ_SF_RELU: return v_blend(v_or_mask(v_gt(x, v_zero()), v_isnan(x)), v_zero(), x);
    case OJ_SF_NEG: return v_neg(x);
    case OJ_SF_SQUARE: return v_mul(x, x);
    case OJ_SF_AFFINE: return v_fmadd(a, x, b);
    case OJ_SF_SQRT: return v_sqrt(x);
    case OJ_SF_RSQRT: return v_div(v_set1(1.0f), v_sqrt(x));
    case OJ_SF_RECIPROCAL: return v_div(v_set1(1.0f), x);
    case OJ_SF_ABS: return v_abs(x);
    default: return x;
    }
}

/* f'(x) (times nothing: the caller multiplies by dy). */
static inline V NAME(vgrad)(oj_simd_fn f, V x, V y, V a) {
    const V one = v_set1(1.0f);
    switch (f) {
    case OJ_SF_EXP: return y;
    case OJ_SF_SIGMOID: return v_mul(y, v_sub(one, y));
    case OJ_SF_TANH: return v_fnmadd(y, y, one);
    case OJ_SF_SILU: {
        V s = NAME(vsigmoid)(x);
        return v_mul(s, v_fmadd(x, v_sub(one, s), one));
    }
    case OJ_SF_GELU_TANH: {
        /* s + 2 x s (1 - s) du, du = sqrt(2/pi) (1 + 3 0.044715 x^2) */
        const float k = 0.7978845608028654f;
        V s = NAME(vgelu_s)(x);
        V du = v_fmadd(v_set1(k * 3.0f * 0.044715f), v_mul(x, x), v_set1(k));
        V t = v_mul(v_mul(v_add(x, x), s), v_sub(one, s));
        return v_fmadd(t, du, s);
    }
    case OJ_SF_GELU: { /* Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
        V e;
        V phi = NAME(vphi)(x, one, &e);
        return v_fmadd(v_mul(x, e), v_set1(0.3989422804014327f), phi);
    }
    case OJ_SF_RELU: return v_blend(v_gt(x, v_zero()), v_zero(), one);
    case OJ_SF_NEG: return v_set1(-1.0f);
    case OJ_SF_SQUARE: return v_add(x, x);
    case OJ_SF_AFFINE: return a;
    case OJ_SF_SQRT: return v_div(v_set1(0.5f), y);
    case OJ_SF_RSQRT: return v_mul(v_set1(-0.5f), v_mul(y, v_mul(y, y)));
    case OJ_SF_RECIPROCAL: return v_neg(v_mul(y, y));
    case OJ_SF_ABS:
        return v_sub(v_blend(v_gt(x, v_zero()), v_zero(), one),
                     v_blend(v_lt(x, v_zero()), v_zero(), one));
    default: return one;
    }
}

/* ---------------------------------------------------------------- entries */

/* The multi-row products (see oj_simd in cpu_simd.h). Each is written once
 * for a constant number of rows R (<= OJ_SIMD_ROWS) and of vectors Q (<=
 * QD) along the wide dimension, with masked loads and stores (mask[q] all
 * ones for full vectors), and instantiated by a switch on (R, Q). */
#define OJ_AI static inline __attribute__((always_inline))

OJ_AI void NAME(masks)(int64_t rem, M *mk) {
#pragma GCC unroll 8
    for (int q = 0; q < QD; q++) mk[q] = v_tailmask(rem - q * VL > 0 ? rem - q * VL : 0);
}

/* keys j0 .. j0 + Q*VL (masked by mk) of out rows */
OJ_AI void NAME(rowdot_rq)(const int R, const int Q, const float *const *x, const float *mt,
                           int64_t ld, int64_t d, const M *mk, V sc, float *out, int64_t ldo) {
    V acc[OJ_SIMD_ROWS][QD];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) acc[r][q] = v_zero();
    const float *row = mt;
    for (int64_t c = 0; c < d; c++, row += ld) {
        V kv[QD];
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) kv[q] = v_loadm(row + q * VL, mk[q]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            V xr = v_set1(x[r][c]);
#pragma GCC unroll 8
            for (int q = 0; q < Q; q++) acc[r][q] = v_fmadd(xr, kv[q], acc[r][q]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) v_storem(out + r * ldo + q * VL, v_mul(acc[r][q], sc), mk[q]);
}

/* columns c0 .. c0 + Q*VL of acc rows */
OJ_AI void NAME(rowcomb_rq)(const int R, const int Q, const float *w, int64_t ldw, int64_t n,
                            const float *m, int64_t ld, const M *mk, float *acc, int64_t lda) {
    V a[OJ_SIMD_ROWS][QD];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) a[r][q] = v_loadm(acc + r * lda + q * VL, mk[q]);
    const float *row = m;
    for (int64_t j = 0; j < n; j++, row += ld) {
        V mv[QD];
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) mv[q] = v_loadm(row + q * VL, mk[q]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            V wr = v_set1(w[r * ldw + j]);
#pragma GCC unroll 8
            for (int q = 0; q < Q; q++) a[r][q] = v_fmadd(wr, mv[q], a[r][q]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) v_storem(acc + r * lda + q * VL, a[r][q], mk[q]);
}

/* columns c0 .. c0 + Q*VL of y rows 0..n */
OJ_AI void NAME(rank_rq)(const int R, const int Q, const float *w, int64_t ldw, int64_t n,
                         const float *const *x, int64_t c0, const M *mk, float *y, int64_t ld) {
    V xv[OJ_SIMD_ROWS][QD];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) xv[r][q] = v_loadm(x[r] + c0 + q * VL, mk[q]);
    float *row = y;
    for (int64_t j = 0; j < n; j++, row += ld) {
        V yv[QD];
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) yv[q] = v_loadm(row + q * VL, mk[q]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            V wr = v_set1(w[r * ldw + j]);
#pragma GCC unroll 8
            for (int q = 0; q < Q; q++) yv[q] = v_fmadd(wr, xv[r][q], yv[q]);
        }
#pragma GCC unroll 8
        for (int q = 0; q < Q; q++) v_storem(row + q * VL, yv[q], mk[q]);
    }
}

/* Instantiate K(R, Q, args) for R in 1..4 and Q in 1..QD. */
#define OJ_DISPATCH_RQ(K, nr, nq, ...)                                                     \
    do {                                                                                   \
        int oj_r_ = (nr) < 1 ? 1 : (nr) > 4 ? 4 : (nr);                                    \
        int oj_q_ = (nq) < 1 ? 1 : (nq) > QD ? QD : (nq);                                  \
        switch (oj_r_ * 8 + oj_q_) {                                                       \
        case 9: K(1, 1, __VA_ARGS__); break;                                               \
        case 10: K(1, 2, __VA_ARGS__); break;                                              \
        case 17: K(2, 1, __VA_ARGS__); break;                                              \
        case 18: K(2, 2, __VA_ARGS__); break;                                              \
        case 25: K(3, 1, __VA_ARGS__); break;                                              \
        case 26: K(3, 2, __VA_ARGS__); break;                                              \
        case 33: K(4, 1, __VA_ARGS__); break;                                              \
        case 34: K(4, 2, __VA_ARGS__); break;                                              \
        OJ_DISPATCH_Q34(K, __VA_ARGS__)                                                    \
        default: break;                                                                    \
        }                                                                                  \
    } while (0)

static void NAME(rowdot)(int nr, const float *const *x, const float *mt, int64_t ld, int64_t d,
                         int64_t n, float scale, float *out, int64_t ldo) {
    const V sc = v_set1(scale);
    for (int64_t j0 = 0; j0 < n; j0 += QD * VL) {
        M mk[QD];
        NAME(masks)(n - j0, mk);
        int64_t rem = n - j0, nq = (rem + VL - 1) / VL;
#define K(R, Q, ...) NAME(rowdot_rq)(R, Q, __VA_ARGS__)
        OJ_DISPATCH_RQ(K, nr, nq, x, mt + j0, ld, d, mk, sc, out + j0, ldo);
#undef K
    }
}

static void NAME(rowcomb)(int nr, const float *w, int64_t ldw, int64_t n, const float *m,
                          int64_t ld, int64_t d, float *acc, int64_t lda) {
    for (int64_t c0 = 0; c0 < d; c0 += QD * VL) {
        M mk[QD];
        NAME(masks)(d - c0, mk);
        int64_t rem = d - c0, nq = (rem + VL - 1) / VL;
#define K(R, Q, ...) NAME(rowcomb_rq)(R, Q, __VA_ARGS__)
        OJ_DISPATCH_RQ(K, nr, nq, w, ldw, n, m + c0, ld, mk, acc + c0, lda);
#undef K
    }
}

static void NAME(rank)(int nr, const float *w, int64_t ldw, int64_t n, const float *const *x,
                       int64_t d, float *y, int64_t ld) {
    for (int64_t c0 = 0; c0 < d; c0 += QD * VL) {
        M mk[QD];
        NAME(masks)(d - c0, mk);
        int64_t rem = d - c0, nq = (rem + VL - 1) / VL;
#define K(R, Q, ...) NAME(rank_rq)(R, Q, __VA_ARGS__)
        OJ_DISPATCH_RQ(K, nr, nq, w, ldw, n, x, c0, mk, y + c0, ld);
#undef K
    }
}
#undef OJ_DISPATCH_RQ

static float NAME(expsum)(float *s, int64_t n, float m) {
    const V mv = v_set1(m);
    V acc = v_zero();
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        V e = NAME(vexp_neg)(v_sub(v_load(s + j), mv));
        v_store(s + j, e);
        acc = v_add(acc, e);
    }
    if (j < n) {
        M mk = v_tailmask(n - j);
        V e = NAME(vexp_neg)(v_sub(v_loadm(s + j, mk), mv));
        e = v_and_tail(e, mk);
        v_storem(s + j, e, mk);
        acc = v_add(acc, e);
    }
    return v_hsum(acc);
}

static float NAME(vmax)(const float *x, int64_t n) {
    V acc = v_set1(-INFINITY), nan = v_zero();
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        V v = v_load(x + j);
        acc = v_max(acc, v);
        nan = v_or_nan(nan, v);
    }
    if (j < n) {
        M mk = v_tailmask(n - j);
        V v = v_blend_tail(v_set1(-INFINITY), v_loadm(x + j, mk), mk);
        acc = v_max(acc, v);
        nan = v_or_nan(nan, v);
    }
    if (v_has_nan(nan)) return NAN;
    return v_hmax(acc);
}

/* Four interleaved chains for long rows (as sum below); rows shorter than
 * 4 VL (the attention's head dim) use one. */
static float NAME(dot)(const float *a, const float *b, int64_t n) {
    V a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    int64_t j = 0;
    for (; j + 4 * VL <= n; j += 4 * VL) {
        a0 = v_fmadd(v_load(a + j), v_load(b + j), a0);
        a1 = v_fmadd(v_load(a + j + VL), v_load(b + j + VL), a1);
        a2 = v_fmadd(v_load(a + j + 2 * VL), v_load(b + j + 2 * VL), a2);
        a3 = v_fmadd(v_load(a + j + 3 * VL), v_load(b + j + 3 * VL), a3);
    }
    for (; j + VL <= n; j += VL) a0 = v_fmadd(v_load(a + j), v_load(b + j), a0);
    if (j < n) {
        M mk = v_tailmask(n - j);
        a0 = v_fmadd(v_loadm(a + j, mk), v_loadm(b + j, mk), a0);
    }
    return v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
}

/* Four interleaved vector sums (add latency, not the load, bounds one
 * chain), combined (0 + 1) + (2 + 3) before the horizontal sum. */
static float NAME(sum)(const float *x, int64_t n) {
    V a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    int64_t j = 0;
    for (; j + 4 * VL <= n; j += 4 * VL) {
        a0 = v_add(a0, v_load(x + j));
        a1 = v_add(a1, v_load(x + j + VL));
        a2 = v_add(a2, v_load(x + j + 2 * VL));
        a3 = v_add(a3, v_load(x + j + 3 * VL));
    }
    for (; j + VL <= n; j += VL) a0 = v_add(a0, v_load(x + j));
    if (j < n) a0 = v_add(a0, v_loadm(x + j, v_tailmask(n - j)));
    return v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
}

static void NAME(scale)(float *y, int64_t n, float a) {
    const V av = v_set1(a);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) v_store(y + j, v_mul(v_load(y + j), av));
    if (j < n) {
        M mk = v_tailmask(n - j);
        v_storem(y + j, v_mul(v_loadm(y + j, mk), av), mk);
    }
}

static float NAME(sumsq_dev)(const float *x, int64_t n, float m) {
    const V mv = v_set1(m);
    V a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    int64_t j = 0;
    for (; j + 4 * VL <= n; j += 4 * VL) {
        V d0 = v_sub(v_load(x + j), mv), d1 = v_sub(v_load(x + j + VL), mv);
        V d2 = v_sub(v_load(x + j + 2 * VL), mv), d3 = v_sub(v_load(x + j + 3 * VL), mv);
        a0 = v_fmadd(d0, d0, a0);
        a1 = v_fmadd(d1, d1, a1);
        a2 = v_fmadd(d2, d2, a2);
        a3 = v_fmadd(d3, d3, a3);
    }
    for (; j + VL <= n; j += VL) {
        V d = v_sub(v_load(x + j), mv);
        a0 = v_fmadd(d, d, a0);
    }
    if (j < n) {
        M mk = v_tailmask(n - j);
        V d = v_and_tail(v_sub(v_loadm(x + j, mk), mv), mk);
        a0 = v_fmadd(d, d, a0);
    }
    return v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
}

static void NAME(norm_apply)(float *y, const float *x, int64_t n, float m, float rs,
                             const float *w, const float *b) {
    const V mv = v_set1(m), rv = v_set1(rs), one = v_set1(1.0f);
    for (int64_t j = 0; j < n; j += VL) {
        M mk = v_tailmask(n - j);
        V v = v_mul(v_sub(v_loadm(x + j, mk), mv), rv);
        v = v_mul(v, w ? v_loadm(w + j, mk) : one);
        if (b) v = v_add(v, v_loadm(b + j, mk));
        v_storem(y + j, v, mk);
    }
}

/* Two interleaved pairs of sums (the fused add's latency bounds one
 * chain), combined at the end. */
static void NAME(norm_bwd_sums)(const float *x, const float *dy, const float *w, int64_t n,
                                float m, float rs, float *sg, float *sgx) {
    const V mv = v_set1(m), rv = v_set1(rs), one = v_set1(1.0f);
    V a0 = v_zero(), c0 = v_zero(), a1 = v_zero(), c1 = v_zero();
    int64_t j = 0;
    for (; j + 2 * VL <= n; j += 2 * VL) {
        V g0 = v_mul(v_load(dy + j), w ? v_load(w + j) : one);
        V g1 = v_mul(v_load(dy + j + VL), w ? v_load(w + j + VL) : one);
        V xh0 = v_mul(v_sub(v_load(x + j), mv), rv);
        V xh1 = v_mul(v_sub(v_load(x + j + VL), mv), rv);
        a0 = v_add(a0, g0);
        a1 = v_add(a1, g1);
        c0 = v_fmadd(g0, xh0, c0);
        c1 = v_fmadd(g1, xh1, c1);
    }
    for (; j < n; j += VL) {
        M mk = v_tailmask(n - j);
        V g = v_mul(v_loadm(dy + j, mk), w ? v_loadm(w + j, mk) : one);
        V xh = v_mul(v_sub(v_loadm(x + j, mk), mv), rv);
        xh = v_and_tail(xh, mk);
        a0 = v_add(a0, g);
        c0 = v_fmadd(g, xh, c0);
    }
    *sg = v_hsum(v_add(a0, a1));
    *sgx = v_hsum(v_add(c0, c1));
}

static void NAME(norm_bwd_dx)(float *dx, const float *x, const float *dy, const float *w,
                              int64_t n, float m, float rs, float a, float c) {
    const V mv = v_set1(m), rv = v_set1(rs), av = v_set1(a), cv = v_set1(c), one = v_set1(1.0f);
    for (int64_t j = 0; j < n; j += VL) {
        M mk = v_tailmask(n - j);
        V g = v_mul(v_loadm(dy + j, mk), w ? v_loadm(w + j, mk) : one);
        V xh = v_mul(v_sub(v_loadm(x + j, mk), mv), rv);
        v_storem(dx + j, v_mul(rv, v_fnmadd(xh, cv, v_sub(g, av))), mk);
    }
}

/* Rows r < nr in order into each column: every dw[j] gets the same adds
 * in the same order as one row at a time, but is loaded and stored once
 * per nr rows, two column vectors at a time (two add chains). */
static void NAME(norm_cols)(double *dw, double *db, const float *x, const float *dy, int64_t ld,
                            int64_t nr, int64_t n, const float *mean, const float *rstd) {
    int64_t j = 0;
    for (; j + 2 * VLD <= n; j += 2 * VLD) {
        VD w0 = vd_load(dw + j), w1 = vd_load(dw + j + VLD);
        VD b0 = db ? vd_load(db + j) : vd_set1(0.0), b1 = db ? vd_load(db + j + VLD) : vd_set1(0.0);
        for (int64_t r = 0; r < nr; r++) {
            const VD mv = vd_set1(mean ? (double)mean[r] : 0.0), rv = vd_set1((double)rstd[r]);
            const float *xr = x + r * ld + j, *gr = dy + r * ld + j;
            VD g0 = vd_from_f32(gr), g1 = vd_from_f32(gr + VLD);
            w0 = vd_add(w0, vd_mul(g0, vd_mul(vd_sub(vd_from_f32(xr), mv), rv)));
            w1 = vd_add(w1, vd_mul(g1, vd_mul(vd_sub(vd_from_f32(xr + VLD), mv), rv)));
            b0 = vd_add(b0, g0);
            b1 = vd_add(b1, g1);
        }
        vd_store(dw + j, w0);
        vd_store(dw + j + VLD, w1);
        if (db) vd_store(db + j, b0), vd_store(db + j + VLD, b1);
    }
    for (; j < n; j++)
        for (int64_t r = 0; r < nr; r++) {
            double g = dy[r * ld + j], m = mean ? (double)mean[r] : 0.0, rs = rstd[r];
            dw[j] += g * (((double)x[r * ld + j] - m) * rs);
            if (db) db[j] += g;
        }
}

static void NAME(acc_cols)(double *acc, const float *x, int64_t ld, int64_t nr, int64_t n,
                           int kind) {
    int64_t j = 0;
    for (; j + VLD <= n; j += VLD) {
        VD a = vd_load(acc + j);
        for (int64_t r = 0; r < nr; r++) {
            VD v = vd_from_f32(x + r * ld + j);
            v = kind == 1 ? vd_abs(v) : kind == 2 ? vd_mul(v, v) : v;
            a = vd_add(a, v);
        }
        vd_store(acc + j, a);
    }
    for (; j < n; j++)
        for (int64_t r = 0; r < nr; r++) {
            double v = x[r * ld + j];
            acc[j] += kind == 1 ? fabs(v) : kind == 2 ? v * v : v;
        }
}

static void NAME(softmax_bwd)(float *dx, const float *y, const float *dy, int64_t n, float s,
                              bool log) {
    const V sv = v_set1(s);
    for (int64_t j = 0; j < n; j += VL) {
        M mk = v_tailmask(n - j);
        V yv = v_loadm(y + j, mk), g = v_loadm(dy + j, mk);
        V r = log ? v_fnmadd(NAME(vexp_neg)(yv), sv, g) : v_mul(yv, v_sub(g, sv));
        v_storem(dx + j, r, mk);
    }
}

/* One loop per function so the switch stays outside the loop. */
#define OJ_UNARY_CASE(F)                                                                   \
    case F:                                                                                \
        for (; j + VL <= n; j += VL) v_store(y + j, NAME(vunary)(F, v_load(x + j), av, bv)); \
        if (j < n) {                                                                       \
            M mk = v_tailmask(n - j);                                                      \
            v_storem(y + j, NAME(vunary)(F, v_loadm(x + j, mk), av, bv), mk);              \
        }                                                                                  \
        break;

static void NAME(unary)(oj_simd_fn f, float *y, const float *x, int64_t n, float a, float b) {
    const V av = v_set1(a), bv = v_set1(b);
    int64_t j = 0;
    switch (f) {
        OJ_UNARY_CASE(OJ_SF_EXP)
        OJ_UNARY_CASE(OJ_SF_SIGMOID)
        OJ_UNARY_CASE(OJ_SF_SILU)
        OJ_UNARY_CASE(OJ_SF_GELU_TANH)
        OJ_UNARY_CASE(OJ_SF_TANH)
        OJ_UNARY_CASE(OJ_SF_RELU)
        OJ_UNARY_CASE(OJ_SF_NEG)
        OJ_UNARY_CASE(OJ_SF_SQUARE)
        OJ_UNARY_CASE(OJ_SF_AFFINE)
        OJ_UNARY_CASE(OJ_SF_SQRT)
        OJ_UNARY_CASE(OJ_SF_RSQRT)
        OJ_UNARY_CASE(OJ_SF_RECIPROCAL)
        OJ_UNARY_CASE(OJ_SF_ABS)
        OJ_UNARY_CASE(OJ_SF_GELU)
    default: break;
    }
}
#undef OJ_UNARY_CASE

#define OJ_GRAD_CASE(F)                                                                    \
    case F:                                                                                \
        for (; j + VL <= n; j += VL)                                                       \
            v_store(dx + j, v_mul(v_load(dy + j),                                          \
                                  NAME(vgrad)(F, v_load(x + j), v_load(y + j), av)));      \
        if (j < n) {                                                                       \
            M mk = v_tailmask(n - j);                                                      \
            v_storem(dx + j, v_mul(v_loadm(dy + j, mk),                                    \
                                   NAME(vgrad)(F, v_loadm(x + j, mk), v_loadm(y + j, mk), av)), \
                     mk);                                                                  \
        }                                                                                  \
        break;

static void NAME(unary_grad)(oj_simd_fn f, float *dx, const float *x, const float *y,
                             const float *dy, int64_t n, float a, float b) {
    (void)b;
    const V av = v_set1(a);
    int64_t j = 0;
    switch (f) {
        OJ_GRAD_CASE(OJ_SF_EXP)
        OJ_GRAD_CASE(OJ_SF_SIGMOID)
        OJ_GRAD_CASE(OJ_SF_SILU)
        OJ_GRAD_CASE(OJ_SF_GELU_TANH)
        OJ_GRAD_CASE(OJ_SF_TANH)
        OJ_GRAD_CASE(OJ_SF_RELU)
        OJ_GRAD_CASE(OJ_SF_NEG)
        OJ_GRAD_CASE(OJ_SF_SQUARE)
        OJ_GRAD_CASE(OJ_SF_AFFINE)
        OJ_GRAD_CASE(OJ_SF_SQRT)
        OJ_GRAD_CASE(OJ_SF_RSQRT)
        OJ_GRAD_CASE(OJ_SF_RECIPROCAL)
        OJ_GRAD_CASE(OJ_SF_ABS)
        OJ_GRAD_CASE(OJ_SF_GELU)
    default: break;
    }
}
#undef OJ_GRAD_CASE

static inline V NAME(vbin)(oj_simd_bin op, V a, V b) {
    switch (op) {
    case OJ_SB_ADD: return v_add(a, b);
    case OJ_SB_SUB: return v_sub(a, b);
    case OJ_SB_MUL: return v_mul(a, b);
    case OJ_SB_DIV: return v_div(a, b);
    case OJ_SB_MAX: /* NaN if either is NaN, else a > b ? a : b */
        return v_blend(v_or_mask(v_isnan(a), v_isnan(b)), v_blend(v_gt(a, b), b, a),
                       v_add(a, b));
    case OJ_SB_MIN:
        return v_blend(v_or_mask(v_isnan(a), v_isnan(b)), v_blend(v_lt(a, b), b, a),
                       v_add(a, b));
    default: return a;
    }
}

#define OJ_BIN_CASE(OP)                                                                    \
    case OP:                                                                               \
        for (; j + VL <= n; j += VL) {                                                     \
            V av = a_step ? v_load(a + j) : ab, bv = b_step ? v_load(b + j) : bb;          \
            v_store(out + j, NAME(vbin)(OP, av, bv));                                      \
        }                                                                                  \
        if (j < n) {                                                                       \
            M mk = v_tailmask(n - j);                                                      \
            V av = a_step ? v_loadm(a + j, mk) : ab, bv = b_step ? v_loadm(b + j, mk) : bb; \
            v_storem(out + j, NAME(vbin)(OP, av, bv), mk);                                 \
        }                                                                                  \
        break;

static void NAME(binary)(oj_simd_bin op, float *out, const float *a, int64_t a_step,
                         const float *b, int64_t b_step, int64_t n) {
    const V ab = v_set1(a[0]), bb = v_set1(b[0]);
    int64_t j = 0;
    switch (op) {
        OJ_BIN_CASE(OJ_SB_ADD)
        OJ_BIN_CASE(OJ_SB_SUB)
        OJ_BIN_CASE(OJ_SB_MUL)
        OJ_BIN_CASE(OJ_SB_DIV)
        OJ_BIN_CASE(OJ_SB_MAX)
        OJ_BIN_CASE(OJ_SB_MIN)
    default: break;
    }
}
#undef OJ_BIN_CASE

/* Full 16 x 16 tiles in registers where the level has them, the rest
 * (and other levels) in 8 x 8 scalar tiles. */
static void NAME(transpose)(float *dst, int64_t ldd, const float *src, int64_t lds,
                            int64_t rows, int64_t cols) {
    int64_t r16 = 0, c16 = 0;
#ifdef v_transpose16
    r16 = rows / 16 * 16, c16 = cols / 16 * 16;
    for (int64_t j0 = 0; j0 < r16; j0 += 16)
        for (int64_t c0 = 0; c0 < c16; c0 += 16)
            v_transpose16(src + j0 * lds + c0, lds, dst + c0 * ldd + j0, ldd);
#endif
    /* the columns right of the tiles, for the tiled rows; then the rest */
    for (int64_t j0 = 0; j0 < r16; j0 += 8)
        for (int64_t c = c16; c < cols; c++)
            for (int64_t j = j0; j < j0 + 8; j++) dst[c * ldd + j] = src[j * lds + c];
    for (int64_t j0 = r16; j0 < rows; j0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            int64_t j1 = j0 + 8 < rows ? j0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t j = j0; j < j1; j++) dst[c * ldd + j] = src[j * lds + c];
        }
}

static const oj_simd NAME(table) = {
    .isa = NAME(isa_level),
    .rowdot = NAME(rowdot),
    .rowcomb = NAME(rowcomb),
    .rank = NAME(rank),
    .expsum = NAME(expsum),
    .max = NAME(vmax),
    .dot = NAME(dot),
    .sum = NAME(sum),
    .scale = NAME(scale),
    .sumsq_dev = NAME(sumsq_dev),
    .norm_apply = NAME(norm_apply),
    .norm_bwd_sums = NAME(norm_bwd_sums),
    .norm_bwd_dx = NAME(norm_bwd_dx),
    .norm_cols = NAME(norm_cols),
    .acc_cols = NAME(acc_cols),
    .softmax_bwd = NAME(softmax_bwd),
    .transpose = NAME(transpose),
    .unary = NAME(unary),
    .unary_grad = NAME(unary_grad),
    .binary = NAME(binary),
};
