/* Crash-safe checkpoint writing: everything goes into a hidden temporary
 * sibling directory, every file and the directory are fsynced, the
 * directory is renamed into place (exchanged atomically with an existing
 * one of the same step), the root is fsynced, and only then is `latest`
 * replaced and are old checkpoints removed. A crash at any point leaves
 * the previous checkpoint whole. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/io_internal.h"

int oj__ckpt_crash_point = 0;

/* Stop here as a crash would when the test hook says so. */
#define CRASH_POINT()                                                                         \
    do {                                                                                      \
        if (oj__ckpt_crash_point > 0 && ++stage == oj__ckpt_crash_point) {                    \
            free(state);                                                                      \
            free(manifest);                                                                   \
            return oj_error_set(err, OJ_ERR_IO, "checkpoint save: simulated crash at stage %d", \
                                stage);                                                       \
        }                                                                                     \
    } while (0)

static oj_status write_text(const char *path, const char *text, oj_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return oj_error_set(err, OJ_ERR_IO, "create %s: %s", path, strerror(errno));
    oj_status rc = oj__write_all(fd, text, strlen(text), path, err);
    if (!rc) rc = oj__fsync_fd(fd, path, err);
    if (close(fd) != 0 && !rc) rc = oj_error_set(err, OJ_ERR_IO, "close %s: %s", path, strerror(errno));
    return rc;
}

static oj_status write_tensors(const char *path, const oj_named_tensors *nt, uint64_t *bytes,
                               uint64_t *hash, oj_error *err) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint save: out of host memory");
    XXH3_64bits_reset(h);
    static const char *const no_names[1] = {NULL};
    static oj_tensor *const none[1] = {NULL};
    int64_t n = nt ? nt->n : 0;
    oj_status rc = oj__st_write_file(path, n, NULL, n ? nt->names : no_names,
                                     n ? nt->tensors : none, NULL, h, err);
    *hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (rc) return rc;
    struct stat sb;
    if (stat(path, &sb) != 0) return oj_error_set(err, OJ_ERR_IO, "stat %s: %s", path, strerror(errno));
    *bytes = (uint64_t)sb.st_size;
    return OJ_OK;
}

static bool is_temporary(const char *name) {
    return (strncmp(name, ".ckpt-", 6) == 0 && (strstr(name, ".tmp-") || strstr(name, ".old-"))) ||
           strncmp(name, ".latest.tmp-", 12) == 0;
}

/* Remove what crashed writers left: hidden temporaries only. */
static oj_status remove_stale(const char *root, oj_error *err) {
    DIR *d = opendir(root);
    if (!d) return oj_error_set(err, OJ_ERR_IO, "open directory %s: %s", root, strerror(errno));
    oj_status rc = OJ_OK;
    struct dirent *de;
    char path[4096];
    while (!rc && (de = readdir(d)) != NULL) {
        if (!is_temporary(de->d_name)) continue;
        rc = oj__path_join(path, sizeof path, root, de->d_name, err);
        if (!rc) rc = oj__rmtree(path, err);
    }
    closedir(d);
    return rc;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Keep `step` and the keep_last - 1 newest others. */
static oj_status retain(const char *root, int64_t step, int keep_last, oj_error *err) {
    int64_t *steps = NULL, n = 0;
    oj_status rc = oj_checkpoint_list(root, &steps, &n, err);
    if (rc) return rc;
    if (n) qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    int kept = 1; /* `step` itself */
    bool removed = false;
    char path[4096];
    for (int64_t i = 0; i < n && !rc; i++) {
        if (steps[i] == step) continue;
        if (kept < keep_last) {
            kept++;
            continue;
        }
        rc = oj_checkpoint_path(root, steps[i], path, sizeof path);
        if (rc) rc = oj_error_set(err, rc, "checkpoint path under %s is too long", root);
        if (!rc) rc = oj__rmtree(path, err);
        removed = true;
    }
    free(steps);
    if (!rc && removed) rc = oj__fsync_dir(root, err);
    return rc;
}

/* Move tmp to final; if final exists (same step saved again), exchange the
 * two atomically and remove the old one. */
static oj_status install(const char *root, const char *tmp, const char *final, oj_error *err) {
    if (rename(tmp, final) == 0) return OJ_OK;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", tmp, final, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0)
        return oj__rmtree(tmp, err); /* tmp now holds the old checkpoint */
    if (errno != EINVAL && errno != ENOSYS)
        return oj_error_set(err, OJ_ERR_IO, "exchange %s and %s: %s", tmp, final, strerror(errno));
    /* no RENAME_EXCHANGE here: move the old one aside first */
    char old[4096];
    const char *base = strrchr(final, '/') + 1;
    int k = snprintf(old, sizeof old, "%s/.%s.old-%ld", root, base, (long)getpid());
    if (k < 0 || (size_t)k >= sizeof old)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "path under %s is too long", root);
    if (rename(final, old) != 0)
        return oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", final, old, strerror(errno));
    if (rename(tmp, final) != 0) {
        oj_status rc = oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", tmp, final, strerror(errno));
        rename(old, final);
        return rc;
    }
    return oj__rmtree(old, err);
}

static oj_status check_named(const oj_named_tensors *nt, const char *what, oj_error *err) {
    if (!nt || nt->n == 0) return OJ_OK;
    if (nt->n < 0 || !nt->names || !nt->tensors)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint save: %s list is malformed", what);
    return OJ_OK;
}

oj_status oj_checkpoint_save(const char *root, int64_t step, const oj_named_tensors *model,
                             const oj_named_tensors *optim, const char *state_json,
                             int keep_last, oj_error *err) {
    char *state = NULL, *manifest = NULL;
    int stage = 0;
    if (!root || !model || step < 0 || keep_last < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "checkpoint save: needs a root, a model, step >= 0 and keep_last >= 0");
    oj_status rc = check_named(model, "model", err);
    if (!rc) rc = check_named(optim, "optimizer", err);
    if (!rc) rc = oj__ckpt_state_text(step, state_json, &state, err);
    if (rc) return rc;

    char name[32], final[4096], tmp[4096], path[4096];
    oj__ckpt_dirname(step, name);
    rc = oj__path_join(final, sizeof final, root, name, err);
    int k = snprintf(tmp, sizeof tmp, "%s/.%s.tmp-%ld", root, name, (long)getpid());
    if (!rc && (k < 0 || (size_t)k >= sizeof tmp))
        rc = oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "checkpoint save: root %s is too long", root);
    if (!rc && mkdir(root, 0755) == 0) {
        /* a new root: make its entry in the parent durable too */
        char parent[4096];
        rc = oj__dirname(root, parent, sizeof parent, err);
        if (!rc) rc = oj__fsync_dir(parent, err);
    } else if (!rc && errno != EEXIST) {
        rc = oj_error_set(err, OJ_ERR_IO, "create directory %s: %s", root, strerror(errno));
    }
    if (!rc) rc = remove_stale(root, err);
    if (!rc && mkdir(tmp, 0755) != 0)
        rc = oj_error_set(err, OJ_ERR_IO, "create directory %s: %s", tmp, strerror(errno));
    if (rc) {
        free(state);
        return rc;
    }

    uint64_t bytes[OJ__CKPT_NFILES], hashes[OJ__CKPT_NFILES];
    const oj_named_tensors *lists[2] = {model, optim};
    for (int f = OJ__CKPT_MODEL; f <= OJ__CKPT_OPTIM && !rc; f++) {
        CRASH_POINT();
        rc = oj__path_join(path, sizeof path, tmp, oj__ckpt_files[f], err);
        if (!rc) rc = write_tensors(path, lists[f], &bytes[f], &hashes[f], err);
    }
    if (!rc) {
        CRASH_POINT();
        bytes[OJ__CKPT_STATE] = strlen(state);
        hashes[OJ__CKPT_STATE] = oj__xxh3(state, strlen(state));
        rc = oj__path_join(path, sizeof path, tmp, oj__ckpt_files[OJ__CKPT_STATE], err);
        if (!rc) rc = write_text(path, state, err);
    }
    if (!rc) rc = oj__ckpt_manifest_text(step, bytes, hashes, &manifest, err);
    if (!rc) {
        CRASH_POINT();
        rc = oj__path_join(path, sizeof path, tmp, OJ__CKPT_MANIFEST, err);
        if (!rc) rc = write_text(path, manifest, err);
    }
    if (!rc) {
        CRASH_POINT();
        rc = oj__fsync_dir(tmp, err);
    }
    if (!rc) {
        CRASH_POINT();
        rc = install(root, tmp, final, err);
    }
    free(state);
    free(manifest);
    state = manifest = NULL;
    if (rc) {
        oj__rmtree(tmp, NULL);
        return rc;
    }
    rc = oj__fsync_dir(root, err);
    if (rc) return rc;
    CRASH_POINT();
    char latest[4096], text[40];
    snprintf(text, sizeof text, "%s\n", name);
    rc = oj__path_join(latest, sizeof latest, root, "latest", err);
    if (!rc) rc = oj__atomic_write(latest, text, strlen(text), err);
    if (rc) return rc;
    CRASH_POINT();
    if (keep_last > 0) {
        rc = retain(root, step, keep_last, err);
        if (rc) {
            char prefix[96];
            snprintf(prefix, sizeof prefix, "checkpoint %s saved, but removing old ones failed: ",
                     name);
            oj__error_prefix(err, prefix);
        }
    }
    return rc;
}

oj_status oj_checkpoint_move_aside(const char *root, const int64_t *steps, int64_t n,
                                   const char *aside, oj_error *err) {
    if (!root || (n > 0 && !steps) || n < 0 || !aside || !aside[0] || strchr(aside, '/') ||
        !strcmp(aside, ".") || !strcmp(aside, ".."))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "checkpoint move aside: needs a root, steps and a plain directory name");
    char dst[4096], from[4096], to[4096], name[32];
    oj_status rc = oj__path_join(dst, sizeof dst, root, aside, err);
    if (rc) return rc;
    if (mkdir(dst, 0755) != 0)
        return oj_error_set(err, OJ_ERR_IO, "create directory %s: %s", dst, strerror(errno));
    for (int64_t i = 0; i < n && !rc; i++) {
        oj__ckpt_dirname(steps[i], name);
        rc = oj__path_join(from, sizeof from, root, name, err);
        if (!rc) rc = oj__path_join(to, sizeof to, dst, name, err);
        if (!rc && rename(from, to) != 0)
            rc = oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", from, to, strerror(errno));
    }
    if (!rc) rc = oj__fsync_dir(dst, err);
    if (!rc) rc = oj__fsync_dir(root, err);
    if (rc) return rc;
    /* `latest`: the newest checkpoint left */
    int64_t *left = NULL, m = 0;
    rc = oj_checkpoint_list(root, &left, &m, err);
    if (rc) return rc;
    char latest[4096];
    rc = oj__path_join(latest, sizeof latest, root, "latest", err);
    if (!rc && m > 0) {
        char text[40];
        oj__ckpt_dirname(left[m - 1], name);
        snprintf(text, sizeof text, "%s\n", name);
        rc = oj__atomic_write(latest, text, strlen(text), err);
    } else if (!rc) {
        if (unlink(latest) != 0 && errno != ENOENT)
            rc = oj_error_set(err, OJ_ERR_IO, "remove %s: %s", latest, strerror(errno));
        else
            rc = oj__fsync_dir(root, err);
    }
    free(left);
    return rc;
}
