/* mkdir -p and atomic (temp + fsync + rename) file writes. */
#include "data/fsutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

oj_status oj_data_mkdirs(const char *dir, oj_error *err) {
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p)
        return oj_error_set(err, OJ_ERR_CAPACITY, "mkdir %s: out of memory", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            oj_status st = oj_error_set(err, OJ_ERR_IO, "cannot create directory %s: %s", p,
                                        strerror(errno));
            free(p);
            return st;
        }
        p[i] = c;
    }
    free(p);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return oj_error_set(err, OJ_ERR_IO, "%s is not a directory", dir);
    return OJ_OK;
}

oj_status oj_atomic_open(oj_atomic_file *af, const char *path, oj_error *err) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->path = strdup(path);
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        oj_atomic_abort(af);
        return oj_error_set(err, OJ_ERR_CAPACITY, "write %s: out of memory", path);
    }
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        oj_status st = oj_error_set(err, OJ_ERR_IO, "cannot create %s: %s", af->tmp, strerror(errno));
        oj_atomic_abort(af);
        return st;
    }
    return OJ_OK;
}

oj_status oj_atomic_commit(oj_atomic_file *af, oj_error *err) {
    bool ok = fflush(af->f) == 0 && !ferror(af->f) && fsync(fileno(af->f)) == 0;
    int e = errno;
    ok = (fclose(af->f) == 0) && ok;
    af->f = NULL;
    if (!ok || rename(af->tmp, af->path) != 0) {
        if (ok)
            e = errno;
        oj_status st = oj_error_set(err, OJ_ERR_IO, "cannot write %s: %s", af->path, strerror(e));
        oj_atomic_abort(af);
        return st;
    }
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
    return OJ_OK;
}

void oj_atomic_abort(oj_atomic_file *af) {
    if (af->f)
        fclose(af->f);
    if (af->tmp)
        unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}
