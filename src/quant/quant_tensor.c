/* Quantized matrices (oj_qtensor): creation from a float tensor or from raw
 * blocks, accessors, dequantization. On a device engine the blocks live in
 * device memory (quantized on the host, then copied) and dequantize runs
 * the backend's qdequant. */
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ojas/ops.h"
#include "quant/quant_internal.h"

bool oj__qdevice_ok(oj_engine *eng, const char *op, oj_qtype t) {
    if (oj_engine_device(eng).type == OJ_DEVICE_CPU) return true;
    if (eng->backend->qgemv && eng->backend->qdequant) return true;
    oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                 "%s: %s weights have no kernels on the %s backend", op, oj_qtype_name(t),
                 eng->backend->name);
    return false;
}

/* An empty qtensor with storage for n x k of type t. */
static oj_qtensor *qtensor_new(oj_engine *eng, oj_qtype t, int64_t n, int64_t k,
                               const char *op) {
    if ((unsigned)t >= OJ_QTYPE_COUNT) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "%s: invalid quantized type %d", op, (int)t);
        return NULL;
    }
    if (!oj__qdevice_ok(eng, op, t)) return NULL;
    const int64_t be = oj_qtype_block_elems(t);
    if (n <= 0 || k <= 0 || k % be) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "%s: %s needs [N, K] with N > 0 and K a positive multiple of %lld, got "
                     "[%lld, %lld]",
                     op, oj_qtype_name(t), (long long)be, (long long)n, (long long)k);
        return NULL;
    }
    oj_qtensor *q = calloc(1, sizeof *q);
    if (q == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        return NULL;
    }
    q->eng = eng;
    q->type = t;
    q->rows = n;
    q->cols = k;
    q->row_bytes = oj_qtype_row_bytes(t, k);
    int64_t shape[2] = {n, (int64_t)q->row_bytes};
    q->blocks = oj_empty(eng, 2, shape, OJ_U8);
    if (q->blocks == NULL) {
        free(q);
        return NULL;
    }
    /* Ours whether or not a scope is open: the scope keeps its own
     * reference and drops it at its end. */
    if (oj_scope_depth(eng) > 0) oj_retain(q->blocks);
    return q;
}

void oj_qtensor_free(oj_qtensor *q) {
    if (q == NULL) return;
    oj_release(q->blocks);
    free(q);
}

oj_qtype oj_qtensor_type(const oj_qtensor *q) { return q ? q->type : OJ_QTYPE_COUNT; }
int64_t oj_qtensor_rows(const oj_qtensor *q) { return q ? q->rows : 0; }
int64_t oj_qtensor_cols(const oj_qtensor *q) { return q ? q->cols : 0; }
size_t oj_qtensor_nbytes(const oj_qtensor *q) {
    return q ? (size_t)q->rows * q->row_bytes : 0;
}
const void *oj_qtensor_data(const oj_qtensor *q) {
    if (q == NULL || oj_engine_device(q->eng).type != OJ_DEVICE_CPU) return NULL;
    return oj__data_ptr(q->blocks);
}
oj_engine *oj_qtensor_engine(const oj_qtensor *q) { return q ? q->eng : NULL; }

/* Rows [r0, r1) of oj_quantize's w, each widened to f32, checked finite and
 * quantized into dst. The range stops at its first non-finite element
 * (bad_row, bad_col, bad_nan; bad_row -1: none). */
typedef struct {
    const uint8_t *src;
    int64_t st0, st1; /* w's strides, elements */
    oj_dtype dt;
    oj_qtype t;
    int64_t k, r0, r1;
    size_t row_bytes;
    uint8_t *dst;
    const fenv_t *env; /* set in a worker: the caller's floating-point environment */
    int64_t bad_row, bad_col;
    bool bad_nan, oom;
} quant_rows_job;

static void *quant_rows(void *arg) {
    quant_rows_job *j = arg;
    if (j->env) fesetenv(j->env); /* a worker rounds as the caller does */
    float *row = malloc((size_t)j->k * sizeof *row);
    if (row == NULL) {
        j->oom = true;
        return NULL;
    }
    const int64_t one = 1, es = (int64_t)oj_dtype_size(j->dt);
    for (int64_t i = j->r0; i < j->r1 && j->bad_row < 0; i++) {
        oj__host_copy(1, &j->k, row, &one, OJ_F32, j->src + i * j->st0 * es, &j->st1, j->dt);
        for (int64_t c = 0; c < j->k && j->bad_row < 0; c++)
            if (!isfinite(row[c])) j->bad_row = i, j->bad_col = c, j->bad_nan = isnan(row[c]);
        if (j->bad_row < 0) oj__quantize_row(j->t, row, j->k, j->dst + (size_t)i * j->row_bytes);
    }
    free(row);
    return NULL;
}

/* Below this many elements oj_quantize runs on the calling thread alone. */
#define QUANT_PARALLEL_MIN (1 << 20)
#define QUANT_MAX_THREADS 64

oj_qtensor *oj_quantize(oj_tensor *w, oj_qtype t) {
    if (w == NULL) return NULL;
    oj_engine *eng = oj__engine_of(w);
    if (eng == NULL || !oj__check_tensor(eng, w, "quantize", "w")) return NULL;
    oj_dtype dt = oj_tensor_dtype(w);
    if (dt != OJ_F32 && dt != OJ_BF16 && dt != OJ_F16) {
        oj_set_error(eng, OJ_ERR_DTYPE, "quantize: w is %s; f32, bf16 or f16 expected",
                     oj_dtype_name(dt));
        return NULL;
    }
    if (oj_rank(w) != 2) {
        char buf[64];
        oj_set_error(eng, OJ_ERR_SHAPE, "quantize: w is %s; a matrix [N, K] expected",
                     oj__shape_fmt(buf, sizeof buf, oj_rank(w), oj_shape(w)));
        return NULL;
    }
    int64_t n = oj_size(w, 0), k = oj_size(w, 1);
    oj_qtensor *q = qtensor_new(eng, t, n, k, "quantize");
    if (q == NULL) return NULL;
    void *tmp = NULL;
    const uint8_t *src = oj__host_read_begin(w, &tmp, "quantize");
    const bool host = oj_engine_device(eng).type == OJ_DEVICE_CPU;
    const size_t nbytes = (size_t)n * q->row_bytes;
    uint8_t *dst = src == NULL ? NULL : host ? oj__data_ptr(q->blocks) : malloc(nbytes);
    if (dst == NULL) {
        if (src != NULL) oj_set_error(eng, OJ_ERR_CAPACITY, "quantize: out of host memory");
        free(tmp);
        oj_qtensor_free(q);
        return NULL;
    }
    /* The rows in contiguous ranges, one a thread (the engine's thread
     * count). Rows are independent, so the blocks are the same bits for any
     * split. The workers are plain threads in the caller's floating-point
     * environment, not the CPU pool, whose FAST mode flushes subnormals. */
    int nt = oj_engine_threads(eng);
    if (nt > QUANT_MAX_THREADS) nt = QUANT_MAX_THREADS;
    if (nt < 1 || n * k < QUANT_PARALLEL_MIN) nt = 1;
    if (nt > n) nt = (int)n;
    fenv_t env;
    const bool have_env = fegetenv(&env) == 0;
    quant_rows_job jobs[QUANT_MAX_THREADS];
    pthread_t th[QUANT_MAX_THREADS];
    bool started[QUANT_MAX_THREADS] = {false};
    for (int i = 0; i < nt; i++)
        jobs[i] = (quant_rows_job){.src = src, .st0 = oj_strides(w)[0], .st1 = oj_strides(w)[1],
                                   .dt = dt, .t = t, .k = k, .r0 = n * i / nt,
                                   .r1 = n * (i + 1) / nt, .row_bytes = q->row_bytes, .dst = dst,
                                   .env = i > 0 && have_env ? &env : NULL, .bad_row = -1};
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, quant_rows, &jobs[i]) == 0;
    quant_rows(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else quant_rows(&jobs[i]); /* no thread for it: here */
    }
    free(tmp);
    /* the first failure in row order, as one thread would meet it */
    const quant_rows_job *bad = NULL;
    bool oom = false;
    for (int i = 0; i < nt && !bad && !oom; i++) {
        oom = jobs[i].oom;
        if (jobs[i].bad_row >= 0) bad = &jobs[i];
    }
    if (bad || oom) {
        if (bad)
            oj_set_error(eng, OJ_ERR_NUMERIC, "quantize: w[%lld, %lld] is %s; %s needs finite values",
                         (long long)bad->bad_row, (long long)bad->bad_col,
                         bad->bad_nan ? "NaN" : "infinite", oj_qtype_name(t));
        else
            oj_set_error(eng, OJ_ERR_CAPACITY, "quantize: out of host memory");
        if (!host) free(dst);
        oj_qtensor_free(q);
        return NULL;
    }
    if (!host) { /* the blocks to the device */
        oj_status s = oj_copy_from_host(q->blocks, dst, nbytes);
        free(dst);
        if (s != OJ_OK) {
            oj_qtensor_free(q);
            return NULL;
        }
    }
    return q;
}

oj_qtensor *oj_qtensor_from_blocks(oj_engine *eng, oj_qtype t, int64_t n, int64_t k,
                                   const void *blocks, size_t nbytes) {
    if (eng == NULL) return NULL;
    if (blocks == NULL) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT, "qtensor_from_blocks: blocks is NULL");
        return NULL;
    }
    oj_qtensor *q = qtensor_new(eng, t, n, k, "qtensor_from_blocks");
    if (q == NULL) return NULL;
    if (nbytes != (size_t)n * q->row_bytes) {
        oj_set_error(eng, OJ_ERR_SHAPE,
                     "qtensor_from_blocks: %zu bytes given; %s [%lld, %lld] takes %zu", nbytes,
                     oj_qtype_name(t), (long long)n, (long long)k, (size_t)n * q->row_bytes);
        oj_qtensor_free(q);
        return NULL;
    }
    if (oj_engine_device(eng).type == OJ_DEVICE_CPU) {
        memcpy(oj__data_ptr(q->blocks), blocks, nbytes);
    } else if (oj_copy_from_host(q->blocks, blocks, nbytes) != OJ_OK) {
        oj_qtensor_free(q);
        return NULL;
    }
    return q;
}

oj_tensor *oj_dequantize(const oj_qtensor *q) {
    if (q == NULL) return NULL;
    int64_t shape[2] = {q->rows, q->cols};
    oj_tensor *y = oj_empty(q->eng, 2, shape, OJ_F32);
    if (y == NULL) return NULL;
    if (oj_engine_device(q->eng).type != OJ_DEVICE_CPU) {
        if (q->eng->backend->qdequant(q->eng, y, q->blocks, (int)q->type) != OJ_OK) {
            oj_release(y);
            return NULL;
        }
        return y;
    }
    const uint8_t *src = oj__data_ptr(q->blocks);
    float *dst = oj__data_ptr(y);
    for (int64_t i = 0; i < q->rows; i++)
        oj__dequantize_row(q->type, src + (size_t)i * q->row_bytes, q->cols,
                           dst + i * q->cols);
    return y;
}

oj_qtensor *oj__qtensor_rows(const oj_qtensor *q, int64_t r0, int64_t n) {
    if (q == NULL) return NULL;
    if (r0 < 0 || n <= 0 || r0 + n > q->rows) {
        oj_set_error(q->eng, OJ_ERR_OUT_OF_RANGE,
                     "qtensor rows: rows [%lld, %lld) are outside the matrix's %lld",
                     (long long)r0, (long long)(r0 + n), (long long)q->rows);
        return NULL;
    }
    oj_qtensor *v = calloc(1, sizeof *v);
    if (v == NULL) {
        oj_set_error(q->eng, OJ_ERR_CAPACITY, "qtensor rows: out of host memory");
        return NULL;
    }
    *v = *q;
    v->rows = n;
    v->blocks = oj_narrow(q->blocks, 0, r0, n);
    if (v->blocks == NULL) {
        free(v);
        return NULL;
    }
    if (oj_scope_depth(q->eng) > 0) oj_retain(v->blocks); /* ours, as qtensor_new's */
    return v;
}

oj_qtensor *oj__qtensor_cat_rows(oj_qtensor *const *parts, int n) {
    if (parts == NULL || n < 1 || parts[0] == NULL) return NULL;
    oj_engine *eng = parts[0]->eng;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        const oj_qtensor *p = parts[i];
        if (p == NULL || p->eng != eng || p->type != parts[0]->type || p->cols != parts[0]->cols) {
            oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                         "qtensor cat rows: part %d is not a %s matrix of K %lld on the same "
                         "engine as part 0",
                         i, oj_qtype_name(parts[0]->type), (long long)parts[0]->cols);
            return NULL;
        }
        rows += p->rows;
    }
    oj_qtensor *q = qtensor_new(eng, parts[0]->type, rows, parts[0]->cols, "qtensor cat rows");
    if (q == NULL) return NULL;
    oj_status s = oj_scope_begin(eng);
    bool scoped = s == OJ_OK;
    for (int64_t i = 0, r0 = 0; s == OJ_OK && i < n; r0 += parts[i]->rows, i++) {
        oj_tensor *dst = oj_narrow(q->blocks, 0, r0, parts[i]->rows);
        s = dst ? oj_copy_(dst, parts[i]->blocks) : oj_last_status(eng);
    }
    if (scoped) oj_scope_end(eng);
    if (s != OJ_OK) {
        oj_qtensor_free(q);
        return NULL;
    }
    return q;
}
