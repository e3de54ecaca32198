/* Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
 *
 * Key = the 64-bit seed (low word first). Counter = (block lo, block hi,
 * stream lo, stream hi) with stream 0 for the engine's generator. A call
 * that fills n elements takes the next ceil(n / per_block) blocks from the
 * engine's offset; element i reads block offset + i / per_block, so every
 * element is a pure function of (seed, offset, i) whatever the thread count
 * or device.
 *   uniform f32/bf16/f16: 4 elements per block, 24 bits each;
 *   uniform f64: 2 elements per block, 53 bits from two words;
 *   normal (all float dtypes): 4 elements per block; words (0,1) and (2,3)
 *   each give a Box-Muller pair (cos, sin) computed in f64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void oj_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t oj__rng_advance(oj_engine *eng, uint64_t nblocks) {
    if (eng->capture_pool) /* recorded once, the draw would repeat on every replay */
        oj_set_error(eng, OJ_ERR_UNSUPPORTED,
                     "random numbers (rand, dropout) during a CUDA graph capture: every replay "
                     "would draw the same ones");
    uint64_t first = eng->rng_offset;
    eng->rng_offset += nblocks;
    return first;
}

uint64_t oj_rng_offset(const oj_engine *eng) { return eng ? eng->rng_offset : 0; }
void oj_rng_set_offset(oj_engine *eng, uint64_t offset) {
    if (eng) eng->rng_offset = offset;
}
void oj_rng_set_seed(oj_engine *eng, uint64_t seed) {
    if (eng == NULL) return;
    eng->seed = seed;
    eng->rng_offset = 0;
}

static void block(uint64_t seed, uint64_t b, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    oj_philox4x32_10(ctr, key, out);
}

/* Largest value of dt strictly below x when v rounded up to x (= high). */
static void store_below(void *p, oj_dtype dt, double v, double high) {
    oj__store(p, dt, v);
    if (oj__load(p, dt) < high) return;
    if (dt == OJ_F32) {
        float f = nextafterf((float)high, -INFINITY);
        memcpy(p, &f, 4);
    } else if (dt == OJ_F64) {
        double d = nextafter(high, -INFINITY);
        memcpy(p, &d, 8);
    } else {
        uint16_t h;
        memcpy(&h, p, 2);
        if (h == 0x0000u || h == 0x8000u) h = 0x8001u; /* below +-0: -smallest */
        else if (h & 0x8000u) h++;                       /* negative: away from 0 */
        else h--;
        memcpy(p, &h, 2);
    }
}

static oj_tensor *rand_fill(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double a,
                            double b, bool normal, const char *op) {
    if (eng == NULL) return NULL;
    if (!oj_dtype_is_float(dt)) {
        oj_set_error(eng, OJ_ERR_DTYPE, "%s: dtype %s is not a float dtype", op, oj_dtype_name(dt));
        return NULL;
    }
    if (!isfinite(a) || !isfinite(b) || (normal ? b < 0 : !(a < b))) {
        oj_set_error(eng, OJ_ERR_INVALID_ARGUMENT,
                     normal ? "%s: mean %g and std %g must be finite, std >= 0"
                            : "%s: need finite low %g < high %g",
                     op, a, b);
        return NULL;
    }
    oj_tensor *t = oj__tensor_alloc(eng, rank, shape, dt, op);
    if (t == NULL) return NULL;
    int64_t n = oj_numel(t);
    size_t es = oj_dtype_size(dt);
    char *p = t->storage->device.type == OJ_DEVICE_CPU ? t->storage->data : malloc(n ? (size_t)n * es : 1);
    if (p == NULL) {
        oj_set_error(eng, OJ_ERR_CAPACITY, "%s: out of host memory", op);
        oj_release(t);
        return NULL;
    }
    const int per = (!normal && dt == OJ_F64) ? 2 : 4;
    uint64_t first = oj__rng_advance(eng, (uint64_t)((n + per - 1) / per));
    uint32_t w[4];
    for (int64_t i = 0; i < n; i += per) {
        block(eng->seed, first + (uint64_t)(i / per), w);
        for (int j = 0; j < per && i + j < n; j++) {
            char *q = p + (size_t)(i + j) * es;
            if (normal) {
                int pair = j / 2;
                double u1 = ((double)(w[2 * pair] >> 8) + 1.0) * 0x1p-24; /* (0, 1] */
                double u2 = (double)(w[2 * pair + 1] >> 8) * 0x1p-24;      /* [0, 1) */
                double r = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
                oj__store(q, dt, a + b * r * ((j & 1) ? sin(th) : cos(th)));
            } else {
                double u = per == 2 ? (double)(((uint64_t)w[2 * j] << 21) ^ (w[2 * j + 1] >> 11)) * 0x1p-53
                                    : (double)(w[j] >> 8) * 0x1p-24;
                store_below(q, dt, a + (b - a) * u, b);
            }
        }
    }
    if (t->storage->device.type != OJ_DEVICE_CPU) {
        oj_status st = n ? eng->backend->copy_h2d(eng, t->storage->data, p, (size_t)n * es) : OJ_OK;
        free(p);
        if (st != OJ_OK) {
            oj_set_error(eng, OJ_ERR_DEVICE, "%s: host-to-device copy failed", op);
            oj_release(t);
            return NULL;
        }
    }
    return t;
}

oj_tensor *oj_rand_uniform(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double low,
                           double high) {
    return rand_fill(eng, rank, shape, dt, low, high, false, "rand_uniform");
}

oj_tensor *oj_rand_normal(oj_engine *eng, int rank, const int64_t *shape, oj_dtype dt, double mean,
                          double std) {
    return rand_fill(eng, rank, shape, dt, mean, std, true, "rand_normal");
}
