/* GPT-2 pre-tokenisation: split text into the pieces that the pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matches, left to right, with ECMAScript semantics for \s (the peer,
 * js-tiktoken, runs this pattern through node's RegExp with the u flag).
 * Two implementations: a hand-written scanner (fast) and PCRE2 (reference);
 * tests prove them identical. Internal to src/data. */
#ifndef OJAS_DATA_PRETOK_H
#define OJAS_DATA_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* Scanner: split s[*pos .. n) into pieces. Writes the end offset of each
 * piece to ends[] (at most max, max >= 1), advances *pos past the last
 * piece written and returns how many were written (0 only at the end).
 * Bytes that are not valid UTF-8 are taken one at a time as characters of
 * the "other" class (as U+FFFD would be), so every byte string splits. */
size_t oj_pretok_split(const uint8_t *s, size_t n, size_t *pos, size_t *ends, size_t max);

/* PCRE2 reference with the same contract; requires valid UTF-8 (checked by
 * the caller). `re` from oj_pretok_pcre2_compile, `md` match data for it
 * (one per thread: it holds the thread's JIT stack).
 * Returns (size_t)-1 on a PCRE2 matching error. */
struct oj_pretok_re;
struct oj_pretok_re *oj_pretok_pcre2_compile(char *errbuf, size_t errlen);
void oj_pretok_pcre2_free(struct oj_pretok_re *re);
void *oj_pretok_pcre2_match_data(const struct oj_pretok_re *re);
void oj_pretok_pcre2_match_data_free(void *md);
size_t oj_pretok_pcre2_split(const struct oj_pretok_re *re, void *md, const uint8_t *s, size_t n,
                             size_t *pos, size_t *ends, size_t max);
/* Any pattern (PCRE2 syntax, UTF-8), compiled as the GPT-2 one is. NULL
 * with the reason in errbuf. */
struct oj_pretok_re *oj_pretok_pcre2_compile_pattern(const char *pattern, char *errbuf,
                                                     size_t errlen);
/* The Split pre-tokenizer's "Isolated" behaviour, as tokenizers.js runs it
 * (regex_split over String.prototype.matchAll): every non-empty match is a
 * piece and so is each non-empty stretch between matches (an empty match
 * ends a stretch but is no piece; the search then goes on one character
 * later). Same contract as above, except
 * max >= 2; valid UTF-8 only. */
size_t oj_pretok_pcre2_split_isolated(const struct oj_pretok_re *re, void *md, const uint8_t *s,
                                      size_t n, size_t *pos, size_t *ends, size_t max);

#endif
