/* Two-stage class table built once from the generated ranges. */
#include "data/unicode.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OJ_UC_BLOCKS_MAX 256

const uint8_t oj_uc_ascii[128] = {
    ['\t'] = OJ_UC_SPACE, ['\n'] = OJ_UC_SPACE, ['\v'] = OJ_UC_SPACE, ['\f'] = OJ_UC_SPACE,
    ['\r'] = OJ_UC_SPACE, [' '] = OJ_UC_SPACE,
    ['0'] = OJ_UC_NUMBER, ['1'] = OJ_UC_NUMBER, ['2'] = OJ_UC_NUMBER, ['3'] = OJ_UC_NUMBER,
    ['4'] = OJ_UC_NUMBER, ['5'] = OJ_UC_NUMBER, ['6'] = OJ_UC_NUMBER, ['7'] = OJ_UC_NUMBER,
    ['8'] = OJ_UC_NUMBER, ['9'] = OJ_UC_NUMBER,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static uint8_t g_stage1[0x110000 >> 8];
static uint8_t g_stage2[OJ_UC_BLOCKS_MAX * 256];
const uint8_t *oj_uc_stage1 = g_stage1;
const uint8_t *oj_uc_stage2 = g_stage2;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build(void) {
    uint8_t block[256];
    int nblocks = 0, r = 0;
    for (uint32_t b = 0; b < (0x110000 >> 8); b++) {
        uint32_t base = b << 8;
        memset(block, OJ_UC_OTHER, sizeof block);
        while (r < oj_uc_nranges && oj_uc_ranges[r].hi < base)
            r++;
        for (int k = r; k < oj_uc_nranges && oj_uc_ranges[k].lo <= base + 255; k++) {
            uint32_t lo = oj_uc_ranges[k].lo < base ? base : oj_uc_ranges[k].lo;
            uint32_t hi = oj_uc_ranges[k].hi > base + 255 ? base + 255 : oj_uc_ranges[k].hi;
            memset(block + (lo - base), oj_uc_ranges[k].cls, hi - lo + 1);
        }
        int found = -1;
        for (int k = 0; k < nblocks; k++)
            if (memcmp(g_stage2 + (size_t)k * 256, block, 256) == 0) {
                found = k;
                break;
            }
        if (found < 0) {
            /* The generated data needs ~150 distinct blocks; more would be a
             * broken table, an internal invariant. */
            if (nblocks == OJ_UC_BLOCKS_MAX)
                abort();
            memcpy(g_stage2 + (size_t)nblocks * 256, block, 256);
            found = nblocks++;
        }
        g_stage1[b] = (uint8_t)found;
    }
}

void oj_uc_init(void) { pthread_once(&g_once, build); }
