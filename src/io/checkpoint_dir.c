/* The checkpoint root: listing complete checkpoints, the `latest`
 * pointer, and directory names. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io_internal.h"

oj_status oj_checkpoint_path(const char *root, int64_t step, char *buf, size_t len) {
    if (!root || !buf || step < 0) return OJ_ERR_INVALID_ARGUMENT;
    char name[32];
    oj__ckpt_dirname(step, name);
    int n = snprintf(buf, len, "%s/%s", root, name);
    return (n < 0 || (size_t)n >= len) ? OJ_ERR_OUT_OF_RANGE : OJ_OK;
}

static int cmp_asc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

oj_status oj_checkpoint_list(const char *root, int64_t **steps, int64_t *n, oj_error *err) {
    if (!root || !steps || !n)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint list: NULL argument");
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return oj_error_set(err, OJ_ERR_IO, "open directory %s: %s", root, strerror(errno));
    int64_t len = 0, cap = 0, *v = NULL;
    struct dirent *de;
    char path[4096];
    oj_status rc = OJ_OK;
    while ((de = readdir(d)) != NULL) {
        int64_t step;
        if (!oj__ckpt_parse_dirname(de->d_name, strlen(de->d_name), &step)) continue;
        bool dir = de->d_type == DT_DIR;
        if (de->d_type == DT_UNKNOWN) {
            struct stat sb;
            dir = oj__path_join(path, sizeof path, root, de->d_name, NULL) == OJ_OK &&
                  lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        }
        if (!dir) continue;
        if (len == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                rc = oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint list: out of host memory");
                break;
            }
            v = nv;
        }
        v[len++] = step;
    }
    closedir(d);
    if (rc) {
        free(v);
        return rc;
    }
    if (len) qsort(v, (size_t)len, sizeof *v, cmp_asc);
    *steps = v;
    *n = len;
    return OJ_OK;
}

oj_status oj_checkpoint_latest(const char *root, int64_t *step, oj_error *err) {
    if (!root || !step)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint latest: NULL argument");
    char path[4096];
    uint8_t *buf;
    size_t len;
    oj_status rc = oj__path_join(path, sizeof path, root, "latest", err);
    if (!rc) rc = oj__read_file(path, 64, &buf, &len, err);
    if (rc) return rc;
    if (!oj__ckpt_parse_latest(buf, len, step)) {
        char q[160];
        rc = oj_error_set(err, OJ_ERR_CORRUPT, "checkpoint %s holds %s, not a checkpoint name", path,
                          oj__quote(q, sizeof q, (const char *)buf, len));
    }
    free(buf);
    return rc;
}
