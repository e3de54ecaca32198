/* The OJAS_* switches and numbers read from the environment (C and CUDA
 * C++). */
#ifndef OJ_CORE_ENV_H
#define OJ_CORE_ENV_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The switch `name`: "0" off, another value on, unset or empty dflt. Read
 * at each call (tests flip switches; a captured graph keeps what its
 * capture read). */
static inline bool oj__env_flag(const char *name, bool dflt) {
    const char *e = getenv(name);
    if (e == NULL || e[0] == '\0') return dflt;
    return strcmp(e, "0") != 0;
}

/* The integer `name`: its whole value in base 10 (strtoll; leading
 * blanks and a sign taken), else dflt: unset, empty, other characters
 * after the digits, or out of range. Read at each call; errno is left as
 * it was. */
static inline int64_t oj__env_int(const char *name, int64_t dflt) {
    const char *e = getenv(name);
    if (e == NULL || e[0] == '\0') return dflt;
    const int saved = errno;
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(e, &end, 10);
    const bool ok = errno == 0 && end != e && *end == '\0';
    errno = saved;
    return ok ? (int64_t)v : dflt;
}

#endif
