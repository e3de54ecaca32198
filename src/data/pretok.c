/* Hand-written scanner for the GPT-2 pre-tokenisation pattern.
 *
 * At each position the pattern's alternatives are tried in order, exactly as
 * a backtracking regex engine would:
 *   1. 's 't 're 've 'm 'll 'd         (ASCII, case-sensitive)
 *   2-4. an optional U+0020 then a run of letters, numbers or "other"
 *        (neither \s nor \p{L} nor \p{N}) characters
 *   5. \s+(?!\S): a whitespace run; if a non-space follows, the run gives
 *      back its last character (which then starts the next piece)
 *   6. \s+: the single whitespace character that 5 left over. */
#include "data/pretok.h"

#include "data/unicode.h"

/* Class and length of the character at s[i] (i < n). */
static inline int char_at(const uint8_t *s, size_t n, size_t i, int *len) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *len = 1;
        return oj_uc_ascii[c];
    }
    uint32_t cp;
    int l = oj__utf8_decode(s + i, n - i, &cp);
    if (l == 0) {
        *len = 1;
        return OJ_UC_OTHER;
    }
    *len = l;
    return oj_uc_class(cp);
}

/* End of the run of class k starting at i. */
static inline size_t run_end(const uint8_t *s, size_t n, size_t i, int k) {
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (oj_uc_ascii[c] != k)
                break;
            i++;
            continue;
        }
        int len;
        if (char_at(s, n, i, &len) != k)
            break;
        i += (size_t)len;
    }
    return i;
}

/* End of the piece that starts at i (< n). */
static size_t piece_end(const uint8_t *s, size_t n, size_t i) {
    uint8_t c = s[i];
    if (c == '\'' && i + 1 < n) {
        uint8_t c1 = s[i + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return i + 2;
        if (i + 2 < n) {
            uint8_t c2 = s[i + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return i + 3;
        }
    }
    int len, k = char_at(s, n, i, &len);
    if (c == ' ' && i + 1 < n) {
        int len1, k1 = char_at(s, n, i + 1, &len1);
        if (k1 != OJ_UC_SPACE)
            return run_end(s, n, i + 1 + (size_t)len1, k1);
    }
    if (k != OJ_UC_SPACE)
        return run_end(s, n, i + (size_t)len, k);
    /* whitespace run [i, j); `last` is where its last character starts */
    size_t j = i, last = i;
    while (j < n) {
        int l;
        if (char_at(s, n, j, &l) != OJ_UC_SPACE)
            break;
        last = j;
        j += (size_t)l;
    }
    if (j == n || last == i)
        return j; /* 5 at the end of text, or 6 for a lone character */
    return last;  /* 5 gives back the last character */
}

size_t oj_pretok_split(const uint8_t *s, size_t n, size_t *pos, size_t *ends, size_t max) {
    oj_uc_init();
    size_t i = *pos, k = 0;
    while (i < n && k < max) {
        i = piece_end(s, n, i);
        ends[k++] = i;
    }
    *pos = i;
    return k;
}
