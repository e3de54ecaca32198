/* tokenizer.json's Split regex (Oniguruma syntax) -> PCRE2, with the meaning
 * that tokenizers.js gives it. Internal to src/data. */
#ifndef OJAS_DATA_HF_REGEX_H
#define OJAS_DATA_HF_REGEX_H

#include <stdbool.h>
#include <stddef.h>

/* A new NUL-terminated PCRE2 pattern (free with free()), or NULL with what
 * could not be translated, and where, written to why (or "out of memory"). */
char *oj_hf_regex_to_pcre2(const char *re, char *why, size_t whylen);

#endif
