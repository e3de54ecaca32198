/* Reference pre-tokeniser: the GPT-2 pattern through PCRE2 (UTF, UCP, JIT).
 * \s is spelled out as ECMAScript's WhiteSpace + LineTerminator set, because
 * the peer (js-tiktoken) runs the pattern through a JavaScript RegExp and
 * PCRE2's \s differs from it (U+0085 is space in PCRE2, U+FEFF is not). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/pretok.h"

#define WS "\\t-\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

static const char k_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                                "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

struct oj_pretok_re {
    pcre2_code *code;
    bool jit;
};

/* What one thread matches with: its match data and, under the JIT, its own
 * JIT stack (a JIT stack serves one thread at a time). */
typedef struct pretok_md {
    pcre2_match_data *md;
    pcre2_jit_stack *stack;
    pcre2_match_context *mctx;
} pretok_md;

struct oj_pretok_re *oj_pretok_pcre2_compile(char *errbuf, size_t errlen) {
    return oj_pretok_pcre2_compile_pattern(k_pattern, errbuf, errlen);
}

struct oj_pretok_re *oj_pretok_pcre2_compile_pattern(const char *pattern, char *errbuf,
                                                     size_t errlen) {
    struct oj_pretok_re *re = calloc(1, sizeof *re);
    if (!re) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(errbuf, errlen, "pcre2_compile at %zu: %s", (size_t)eo, (char *)msg);
        free(re);
        return NULL;
    }
    /* JIT when available; the interpreter gives the same matches. */
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return re;
}

void oj_pretok_pcre2_free(struct oj_pretok_re *re) {
    if (!re)
        return;
    pcre2_code_free(re->code);
    free(re);
}

void *oj_pretok_pcre2_match_data(const struct oj_pretok_re *re) {
    pretok_md *m = calloc(1, sizeof *m);
    if (!m || !(m->md = pcre2_match_data_create_from_pattern(re->code, NULL))) {
        free(m);
        return NULL;
    }
    /* Long whitespace runs backtrack, so give the JIT a roomy stack. */
    if (re->jit) {
        m->stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        m->mctx = pcre2_match_context_create(NULL);
        if (!m->stack || !m->mctx) {
            oj_pretok_pcre2_match_data_free(m);
            return NULL;
        }
        pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
    }
    return m;
}

void oj_pretok_pcre2_match_data_free(void *md) {
    pretok_md *m = md;
    if (!m)
        return;
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->stack);
    pcre2_match_data_free(m->md);
    free(m);
}

size_t oj_pretok_pcre2_split(const struct oj_pretok_re *re, void *mdv, const uint8_t *s, size_t n,
                             size_t *pos, size_t *ends, size_t max) {
    pretok_md *m = mdv;
    pcre2_match_data *md = m->md;
    size_t i = *pos, k = 0;
    while (i < n && k < max) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, i, PCRE2_NO_UTF_CHECK, md, m->mctx);
        if (rc < 0)
            return (size_t)-1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        /* The pattern matches every character, so each match starts at i
         * and is non-empty. */
        if (ov[0] != i || ov[1] <= i)
            return (size_t)-1;
        i = ov[1];
        ends[k++] = i;
    }
    *pos = i;
    return k;
}

size_t oj_pretok_pcre2_split_isolated(const struct oj_pretok_re *re, void *mdv, const uint8_t *s,
                                      size_t n, size_t *pos, size_t *ends, size_t max) {
    pretok_md *m = mdv;
    pcre2_match_data *md = m->md;
    size_t i = *pos, from = i, k = 0;
    while (i < n && k + 2 <= max) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            ends[k++] = i = n; /* the rest is one gap */
            break;
        }
        if (rc < 0)
            return (size_t)-1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] == ov[1]) { /* empty match: it ends the gap before it, is no piece
                                 itself, and the search goes on one character later */
            if (ov[0] >= n) {
                ends[k++] = i = n;
                break;
            }
            if (ov[0] > i)
                ends[k++] = i = ov[0];
            from = ov[0] + 1;
            while (from < n && (s[from] & 0xC0) == 0x80)
                from++;
            continue;
        }
        if (ov[0] > i)
            ends[k++] = ov[0]; /* the gap before the match */
        ends[k++] = i = from = ov[1];
    }
    *pos = i;
    return k;
}
