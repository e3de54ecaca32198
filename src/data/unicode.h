/* Code point classes of the GPT-2 pre-tokenisation pattern. Internal to
 * src/data; the UTF-8 codec it goes with is core/utf8.h. */
#ifndef OJAS_DATA_UNICODE_H
#define OJAS_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/utf8.h"

/* Classes, as the pattern sees them: \p{L}, \p{N}, \s (ECMAScript), other. */
enum { OJ_UC_OTHER = 0, OJ_UC_LETTER = 1, OJ_UC_NUMBER = 2, OJ_UC_SPACE = 3 };

typedef struct oj_uc_range {
    uint32_t lo, hi; /* inclusive */
    uint8_t cls;
} oj_uc_range;

/* Generated tables (unicode_classes.c). */
extern const oj_uc_range oj_uc_ranges[];
extern const int oj_uc_nranges;
extern const char oj_unicode_version[];

/* Class of every ASCII byte (0..127); bytes >= 0x80 hold OJ_UC_OTHER. */
extern const uint8_t oj_uc_ascii[128];

/* Two-stage lookup: class of code point cp (<= 0x10FFFF). Call
 * oj_uc_init() once before (thread-safe, idempotent). */
void oj_uc_init(void);
extern const uint8_t *oj_uc_stage1; /* [0x1100] block index per 256 code points */
extern const uint8_t *oj_uc_stage2; /* [blocks * 256] classes */

static inline int oj_uc_class(uint32_t cp) {
    return oj_uc_stage2[(size_t)oj_uc_stage1[cp >> 8] * 256 + (cp & 255)];
}

#endif
