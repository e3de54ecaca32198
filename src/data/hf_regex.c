/* The Split pre-tokenizer's regex, from the Oniguruma syntax that
 * tokenizer.json files are written in to PCRE2, with the meaning that
 * tokenizers.js (the reference encoder) gives it after its own rewrite to a
 * JavaScript RegExp:
 *   \s, \S        Unicode White_Space and its complement (not ECMAScript's
 *                 \s: U+0085 is space, U+FEFF is not)
 *   (?i:...)      case-insensitive for ASCII letters only ('s matches 'S,
 *                 never U+017F)
 *   .             any character but \n
 * Everything else that is passed through means the same in both engines:
 * literals, \p{..}/\P{..}, character classes with ranges, the escapes \r \n
 * \t \f \v \xHH \x{H..} \uHHHH and escaped punctuation, groups (?: (?= (?!
 * (?<= (?<!, and the quantifiers ? * + {n} {n,} {n,m} {,m} with an optional
 * lazy ?. Any other construct (anchors, \w \d \b, backreferences, possessive
 * or atomic forms, a case-insensitive character class, ...) is refused by
 * name rather than approximated. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/hf_regex.h"

#define WS_BODY                                                                                    \
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"          \
    "\\x{205F}\\x{3000}"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_alnum(char c) { return is_alpha(c) || (c >= '0' && c <= '9'); }
static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char *fail(char *why, size_t whylen, sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    free(b->p);
    return NULL;
}

/* Length of the escape at s[0] == '\\' that needs no rewrite in or out of a
 * class (\p{..} \P{..} \xHH \x{..} \uHHHH \r \n \t \f \v, escaped
 * punctuation), writing its PCRE2 form to b; 0 if it is none of these. */
static size_t plain_escape(const char *s, sbuf *b, bool fold, bool *folded_hex) {
    char c = s[1];
    *folded_hex = false;
    if (c == 'p' || c == 'P') {
        if (s[2] != '{')
            return 0;
        size_t k = 3;
        while (is_alnum(s[k]) || s[k] == '_')
            k++;
        if (s[k] != '}' || k == 3 || (k - 3 == 4 && memcmp(s + 3, "Word", 4) == 0))
            return 0;
        put(b, s, k + 1);
        return k + 1;
    }
    if (c == 'x' || c == 'u') {
        size_t k;
        char hex[9];
        if (c == 'x' && s[2] == '{') {
            k = 3;
            while (is_hex(s[k]) && k < 11)
                k++;
            if (s[k] != '}' || k == 3)
                return 0;
            memcpy(hex, s + 3, k - 3);
            hex[k - 3] = 0;
            k++;
        } else {
            size_t want = c == 'x' ? 2 : 4;
            for (k = 0; k < want; k++)
                if (!is_hex(s[2 + k]))
                    return 0;
            memcpy(hex, s + 2, want);
            hex[want] = 0;
            k = 2 + want;
        }
        unsigned long cp = strtoul(hex, NULL, 16);
        if (fold && cp < 128 && is_alpha((char)cp)) {
            *folded_hex = true;
            return k;
        }
        char tmp[24];
        snprintf(tmp, sizeof tmp, "\\x{%lX}", cp);
        puts_(b, tmp);
        return k;
    }
    if (c == 'r' || c == 'n' || c == 't' || c == 'f' || c == 'v') {
        put(b, s, 2);
        return 2;
    }
    if (c && !is_alnum(c) && (unsigned char)c < 0x80) {
        put(b, s, 2);
        return 2;
    }
    return 0;
}

char *oj_hf_regex_to_pcre2(const char *re, char *why, size_t whylen) {
    sbuf b = {0};
    bool fold_stack[64], fold = false;
    int depth = 0;
    bool prev_quant = false; /* the last thing written was a quantifier */
    size_t i = 0;
    while (re[i]) {
        char c = re[i];
        bool fh;
        if (c == '\\') {
            char e = re[i + 1];
            if (!e)
                return fail(why, whylen, &b, "a trailing backslash");
            if (e == 's' || e == 'S') {
                puts_(&b, e == 's' ? "[" WS_BODY "]" : "[^" WS_BODY "]");
                i += 2;
            } else {
                size_t k = plain_escape(re + i, &b, fold, &fh);
                if (!k)
                    return fail(why, whylen, &b, "the escape \\%c at offset %zu", e, i);
                if (fh)
                    return fail(why, whylen, &b,
                                "a letter written as an escape inside (?i:...) at offset %zu", i);
                i += k;
            }
            prev_quant = false;
            continue;
        }
        if (c == '[') {
            size_t start = i;
            put(&b, "[", 1);
            i++;
            if (re[i] == '^') {
                put(&b, "^", 1);
                i++;
            }
            if (re[i] == ']')
                return fail(why, whylen, &b, "a character class starting with ] at offset %zu",
                            start);
            while (re[i] && re[i] != ']') {
                char d = re[i];
                if (d == '[')
                    return fail(why, whylen, &b, "a nested character class at offset %zu", i);
                if (d == '&' && re[i + 1] == '&')
                    return fail(why, whylen, &b, "a class intersection (&&) at offset %zu", i);
                if (d == '\\') {
                    if (re[i + 1] == 's') {
                        puts_(&b, WS_BODY);
                        i += 2;
                        continue;
                    }
                    size_t k = plain_escape(re + i, &b, fold, &fh);
                    if (!k || fh)
                        return fail(why, whylen, &b,
                                    "the escape \\%c in a character class at offset %zu",
                                    re[i + 1] ? re[i + 1] : '?', i);
                    i += k;
                    continue;
                }
                if (fold && is_alpha(d))
                    return fail(why, whylen, &b,
                                "a character class with letters inside (?i:...) at offset %zu",
                                start);
                put(&b, re + i, 1);
                i++;
            }
            if (!re[i])
                return fail(why, whylen, &b, "an unterminated character class at offset %zu",
                            start);
            put(&b, "]", 1);
            i++;
            prev_quant = false;
            continue;
        }
        if (c == '(') {
            static const char *const ok[] = {"(?:", "(?=", "(?!", "(?<=", "(?<!"};
            size_t k = 0;
            bool fold_in = fold;
            if (strncmp(re + i, "(?i:", 4) == 0) {
                puts_(&b, "(?:");
                k = 4;
                fold_in = true;
            } else if (re[i + 1] != '?') {
                put(&b, "(", 1);
                k = 1;
            } else {
                for (size_t j = 0; j < sizeof ok / sizeof ok[0]; j++)
                    if (strncmp(re + i, ok[j], strlen(ok[j])) == 0) {
                        puts_(&b, ok[j]);
                        k = strlen(ok[j]);
                        break;
                    }
                if (!k)
                    return fail(why, whylen, &b, "the group form \"%.4s\" at offset %zu", re + i,
                                i);
            }
            if (depth == (int)(sizeof fold_stack / sizeof fold_stack[0]))
                return fail(why, whylen, &b, "groups nested deeper than 64");
            fold_stack[depth++] = fold;
            fold = fold_in;
            i += k;
            prev_quant = false;
            continue;
        }
        if (c == ')') {
            if (depth == 0)
                return fail(why, whylen, &b, "an unbalanced ) at offset %zu", i);
            fold = fold_stack[--depth];
            put(&b, ")", 1);
            i++;
            prev_quant = false;
            continue;
        }
        if (c == '{') {
            size_t k = i + 1, lo_digits = 0, hi_digits = 0;
            while (re[k] >= '0' && re[k] <= '9')
                k++, lo_digits++;
            bool comma = re[k] == ',';
            if (comma) {
                k++;
                while (re[k] >= '0' && re[k] <= '9')
                    k++, hi_digits++;
            }
            if (re[k] == '}' && (lo_digits || hi_digits) && !prev_quant && b.n > 0) {
                if (re[k + 1] == '+' || re[k + 1] == '*')
                    return fail(why, whylen, &b,
                                "a repeated interval quantifier \"}%c\" at offset %zu", re[k + 1],
                                k);
                put(&b, "{", 1);
                if (!lo_digits)
                    put(&b, "0", 1);
                put(&b, re + i + 1, k - i);
                i = k + 1;
                prev_quant = true;
                continue;
            }
            puts_(&b, "\\{");
            i++;
            prev_quant = false;
            continue;
        }
        if (c == '+' || c == '*' || c == '?') {
            if (prev_quant && c != '?')
                return fail(why, whylen, &b, "a possessive quantifier at offset %zu", i);
            put(&b, re + i, 1);
            i++;
            prev_quant = c != '?' || !prev_quant; /* "x??" ends the quantifier */
            continue;
        }
        prev_quant = false;
        if (c == '^' || c == '$')
            return fail(why, whylen, &b, "the anchor %c at offset %zu", c, i);
        if (c == '.') {
            puts_(&b, "[^\\n]");
            i++;
        } else if (c == '}' || c == ']') {
            put(&b, "\\", 1);
            put(&b, re + i, 1);
            i++;
        } else if (fold && is_alpha(c)) {
            char t[5] = {'[', (char)(c | 0x20), (char)(c & ~0x20), ']', 0};
            puts_(&b, t);
            i++;
        } else {
            put(&b, re + i, 1); /* UTF-8 continuation bytes pass through one by one */
            i++;
        }
    }
    if (depth)
        return fail(why, whylen, &b, "an unclosed group");
    if (b.oom || !b.p)
        return fail(why, whylen, &b, b.oom ? "out of memory" : "an empty pattern");
    return b.p;
}
