/* tiktoken encodings whose rank files ojas recognises beyond GPT-2's: their
 * pre-tokenisation patterns (PCRE2, generated: tiktoken_patterns.c) and
 * special tokens. Internal to src/data. */
#ifndef OJAS_DATA_TIKTOKEN_H
#define OJAS_DATA_TIKTOKEN_H

#include <stdint.h>

typedef struct oj_tiktoken_special {
    const char *text;
    int32_t id;
} oj_tiktoken_special;

typedef struct oj_tiktoken_encoding {
    const char *name;     /* "cl100k_base", "o200k_base" */
    int32_t n_ranks;      /* mergeable ranks 0 .. n_ranks-1 */
    const char *pattern;  /* PCRE2 (UTF, UCP), the meaning js-tiktoken's RegExp gives it */
    const oj_tiktoken_special *specials;
    int n_specials;
} oj_tiktoken_encoding;

extern const oj_tiktoken_encoding oj_tiktoken_encodings[];
extern const int oj_tiktoken_n_encodings;

#endif
