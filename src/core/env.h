/* The OJAS_* switches read from the environment (C and CUDA C++). */
#ifndef OJ_CORE_ENV_H
#define OJ_CORE_ENV_H

#include <stdbool.h>
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

#endif
