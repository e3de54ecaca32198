/* Keyed bijection on [0, n) for shuffling windows: a balanced Feistel
 * network on the smallest even-bit power of two >= n, with Philox4x32-10 as
 * the round function keyed by the seed and counter (half, round, epoch),
 * and cycle walking back into [0, n) (Black & Rogaway, "Ciphers with
 * Arbitrary Finite Domains", 2002). */
#include "ojas/data.h"

#define OJ_FEISTEL_ROUNDS 6

int64_t oj_loader_permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t p) {
    if (n <= 1 || p < 0 || p >= n)
        return p;
    int bits = 2;
    while (bits < 64 && ((uint64_t)1 << bits) < (uint64_t)n)
        bits++;
    if (bits & 1)
        bits++;
    int half = bits / 2;
    uint64_t mask = half == 32 ? 0xFFFFFFFFull : (((uint64_t)1 << half) - 1);
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t x = (uint64_t)p;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (uint32_t r = 0; r < OJ_FEISTEL_ROUNDS; r++) {
            uint32_t ctr[4] = {(uint32_t)R, r, (uint32_t)epoch, (uint32_t)(epoch >> 32)};
            uint32_t o[4];
            oj_philox4x32_10(ctr, key, o);
            uint64_t F = ((uint64_t)o[1] << 32 | o[0]) & mask;
            uint64_t nl = R, nr = L ^ F;
            L = nl;
            R = nr;
        }
        x = (L << half) | R;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}
