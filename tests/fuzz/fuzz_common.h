/* Helpers shared by the fuzz targets that drive path-based readers: a
 * per-process scratch directory (in /dev/shm when there is one, so the
 * files never touch a disk) and whole-file writes. Header-only, included by
 * one target each; every function is static. */
#ifndef OJAS_FUZZ_COMMON_H
#define OJAS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_CHECK(c)                                                     \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,      \
                    __LINE__, #c);                                      \
            abort();                                                    \
        }                                                               \
    } while (0)

#define FZ_SEP "|OJSEP|"

static char fz_dir[256];

static inline void fz_cleanup(void) {
    char cmd[300];
    if (fz_dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
        if (system(cmd) != 0) fprintf(stderr, "fuzz: cannot remove %s\n", fz_dir);
    }
}

/* The scratch directory, made on first use and removed at exit. */
static inline const char *fz_scratch(void) {
    if (fz_dir[0]) return fz_dir;
    struct stat sb;
    const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(fz_dir, sizeof fz_dir, "%s/ojas-fuzz-XXXXXX", base);
    FZ_CHECK(mkdtemp(fz_dir));
    atexit(fz_cleanup);
    return fz_dir;
}

/* scratch/<name> into buf (creating scratch/<dir part> when name has one). */
static inline const char *fz_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", fz_scratch(), name);
    return buf;
}

static inline void fz_mkdir(const char *name) {
    char p[512];
    fz_path(p, sizeof p, name);
    FZ_CHECK(mkdir(p, 0700) == 0 || access(p, F_OK) == 0);
}

static inline void fz_write(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f);
    FZ_CHECK(n == 0 || fwrite(data, 1, n, f) == n);
    FZ_CHECK(fclose(f) == 0);
}

/* Split data into up to max parts at FZ_SEP; returns the number found
 * (missing trailing parts are empty). */
static inline int fz_split(const uint8_t *data, size_t size, int max, const uint8_t **part, size_t *len) {
    size_t k = strlen(FZ_SEP);
    const uint8_t *p = data, *end = data + size;
    int n = 0;
    for (int i = 0; i < max; i++) part[i] = end, len[i] = 0;
    while (n < max) {
        const uint8_t *s = NULL;
        if (n < max - 1)
            for (const uint8_t *q = p; q + k <= end; q++)
                if (memcmp(q, FZ_SEP, k) == 0) {
                    s = q;
                    break;
                }
        part[n] = p;
        len[n] = (size_t)((s ? s : end) - p);
        n++;
        if (!s) break;
        p = s + k;
    }
    return n;
}

#endif
