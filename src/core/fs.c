/* File-system steps shared by io, data and train: full writes, fsync of
 * files and directories, temporary siblings, atomic replacement, mkdir -p,
 * opening regular files (and nothing else) for reading, whole-file reads,
 * tree removal (declared in core/fs.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"

oj_status oj__write_all(int fd, const void *buf, size_t len, const char *path, oj_error *err) {
    const char *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return oj_error_set(err, OJ_ERR_IO, "write %s: %s", path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return OJ_OK;
}

oj_status oj__fsync_fd(int fd, const char *path, oj_error *err) {
    while (fsync(fd) != 0) {
        if (errno == EINTR) continue;
        return oj_error_set(err, OJ_ERR_IO, "fsync %s: %s", path, strerror(errno));
    }
    return OJ_OK;
}

oj_status oj__fsync_dir(const char *dir, oj_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return oj_error_set(err, OJ_ERR_IO, "open directory %s: %s", dir, strerror(errno));
    oj_status st = oj__fsync_fd(fd, dir, err);
    close(fd);
    return st;
}

oj_status oj__path_join(char *buf, size_t len, const char *a, const char *b, oj_error *err) {
    int n = snprintf(buf, len, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= len)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "path %s/%s is longer than %zu bytes", a, b,
                            len - 1);
    return OJ_OK;
}

oj_status oj__dirname(const char *path, char *buf, size_t len, oj_error *err) {
    const char *slash = strrchr(path, '/');
    size_t n;
    const char *src = path;
    if (!slash) {
        src = ".", n = 1;
    } else if (slash == path) {
        n = 1; /* "/name" */
    } else {
        n = (size_t)(slash - path);
    }
    if (n >= len) return oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "path %s is too long", path);
    memcpy(buf, src, n);
    buf[n] = '\0';
    return OJ_OK;
}

oj_status oj__temp_sibling(const char *path, char *buf, size_t len, oj_error *err) {
    static atomic_uint counter;
    char dir[4096];
    oj_status st = oj__dirname(path, dir, sizeof dir, err);
    if (st) return st;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base) return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "path %s names no file", path);
    unsigned k = atomic_fetch_add(&counter, 1u);
    int n = snprintf(buf, len, "%s/.%s.tmp-%ld-%u", dir, base, (long)getpid(), k);
    if (n < 0 || (size_t)n >= len)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "path %s is too long", path);
    return OJ_OK;
}

oj_status oj__mkdirs(const char *dir, oj_error *err) {
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) return oj_error_set(err, OJ_ERR_CAPACITY, "mkdir %s: out of memory", dir);
    memcpy(p, dir, n + 1);
    struct stat sb;
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        /* an existing directory may refuse mkdir with another error than
         * EEXIST (a read-only file system, no write permission on its parent) */
        if (mkdir(p, 0777) != 0 && errno != EEXIST && !(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))) {
            oj_status st = oj_error_set(err, OJ_ERR_IO, "cannot create directory %s: %s", p,
                                        strerror(errno));
            free(p);
            return st;
        }
        p[i] = c;
    }
    free(p);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return oj_error_set(err, OJ_ERR_IO, "%s is not a directory", dir);
    return OJ_OK;
}

oj_status oj__atomic_open(oj__atomic_file *af, const char *path, oj_error *err) {
    af->f = NULL;
    af->tmp[0] = '\0';
    int n = snprintf(af->path, sizeof af->path, "%s", path);
    if (n < 0 || (size_t)n >= sizeof af->path)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE, "path %s is too long", path);
    oj_status st = oj__temp_sibling(path, af->tmp, sizeof af->tmp, err);
    if (st) {
        af->tmp[0] = '\0';
        return st;
    }
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = oj_error_set(err, OJ_ERR_IO, "create %s: %s", af->tmp, strerror(errno));
        af->tmp[0] = '\0';
        return st;
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        st = oj_error_set(err, OJ_ERR_IO, "open %s: %s", af->tmp, strerror(errno));
        close(fd);
        oj__atomic_abort(af);
        return st;
    }
    return OJ_OK;
}

oj_status oj__atomic_commit(oj__atomic_file *af, oj_error *err) {
    char dir[OJ__PATH_MAX];
    oj_status st = oj__dirname(af->path, dir, sizeof dir, err);
    errno = 0;
    if (!st && fflush(af->f) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "write %s: %s", af->tmp, strerror(errno));
    else if (!st && ferror(af->f))
        st = oj_error_set(err, OJ_ERR_IO, "write %s: an earlier write failed", af->tmp);
    if (!st) st = oj__fsync_fd(fileno(af->f), af->tmp, err);
    if (fclose(af->f) != 0 && !st)
        st = oj_error_set(err, OJ_ERR_IO, "close %s: %s", af->tmp, strerror(errno));
    af->f = NULL;
    if (!st && rename(af->tmp, af->path) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", af->tmp, af->path, strerror(errno));
    if (st) {
        oj__atomic_abort(af);
        return st;
    }
    af->tmp[0] = '\0';
    return oj__fsync_dir(dir, err);
}

void oj__atomic_abort(oj__atomic_file *af) {
    if (af->f) fclose(af->f);
    af->f = NULL;
    if (af->tmp[0]) unlink(af->tmp);
    af->tmp[0] = '\0';
}

oj_status oj__atomic_write(const char *path, const void *data, size_t len, oj_error *err) {
    oj__atomic_file af;
    oj_status st = oj__atomic_open(&af, path, err);
    if (st) return st;
    st = oj__write_all(fileno(af.f), data, len, af.tmp, err);
    if (st) {
        oj__atomic_abort(&af);
        return st;
    }
    return oj__atomic_commit(&af, err);
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "something else";
}

oj_status oj__open_regular(const char *path, const char *what, int *fd, size_t *size,
                           oj_error *err) {
    const char *w = what ? what : "", *sp = what ? " " : "";
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0) /* a very long name (text given as a path) cut short */
        return oj_error_set(err, OJ_ERR_IO, "cannot open %s%s%.160s%s: %s", w, sp, path,
                            strlen(path) > 160 ? "..." : "", strerror(errno));
    struct stat sb;
    oj_status st = OJ_OK;
    int fl;
    if (fstat(*fd, &sb) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "cannot stat %s%s%s: %s", w, sp, path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) /* a FIFO could block, a device may never end */
        st = oj_error_set(err, OJ_ERR_IO, "%s%s%s is %s, not a regular file", w, sp, path,
                          file_kind(sb.st_mode));
    else if ((fl = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "cannot open %s%s%s: %s", w, sp, path, strerror(errno));
    if (st) {
        close(*fd);
        *fd = -1;
        return st;
    }
    if (size) *size = (size_t)sb.st_size;
    return OJ_OK;
}

FILE *oj__fopen_regular(const char *path, const char *what, oj_error *err) {
    int fd;
    if (oj__open_regular(path, what, &fd, NULL, err)) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        oj_error_set(err, OJ_ERR_IO, "cannot open %s%s%s: %s", what ? what : "", what ? " " : "",
                     path, strerror(errno));
        close(fd);
    }
    return f;
}

oj_status oj__read_file(const char *path, size_t max, uint8_t **buf, size_t *len, oj_error *err) {
    *buf = NULL;
    *len = 0;
    int fd;
    size_t cap;
    oj_status st = oj__open_regular(path, NULL, &fd, &cap, err);
    if (st) return st;
    if (cap > max) {
        close(fd);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s is %zu bytes, more than the %zu accepted",
                            path, cap, max);
    }
    uint8_t *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        return oj_error_set(err, OJ_ERR_CAPACITY, "read %s: out of host memory", path);
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            /* the file may have grown since fstat: one more byte says so */
            char extra;
            ssize_t r = read(fd, &extra, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r != 0) {
                free(b);
                close(fd);
                return oj_error_set(err, OJ_ERR_IO, "read %s: the file changed while read", path);
            }
            break;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            st = oj_error_set(err, OJ_ERR_IO, "read %s: %s", path, strerror(errno));
            free(b);
            close(fd);
            return st;
        }
        if (r == 0) break; /* shrank: take what is there */
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return OJ_OK;
}

oj_status oj__read_stream(FILE *f, const char *name, char **buf, size_t *len, oj_error *err) {
    *buf = NULL;
    *len = 0;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb)
            free(b);
        b = nb;
    }
    if (!b)
        return oj_error_set(err, OJ_ERR_CAPACITY, "read %s: out of host memory", name);
    if (ferror(f)) {
        free(b);
        return oj_error_set(err, OJ_ERR_IO, "read %s: read error", name);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return OJ_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    int r = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    return r == 0 ? 0 : errno;
}

oj_status oj__rmtree(const char *path, oj_error *err) {
    int r = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (r == 0) return OJ_OK;
    if (r < 0) r = errno;
    if (r == ENOENT) return OJ_OK;
    return oj_error_set(err, OJ_ERR_IO, "remove %s: %s", path, strerror(r));
}
