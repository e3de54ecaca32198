/* File-system steps that make writes durable: full writes, fsync of files
 * and directories, temporary siblings, atomic replacement, tree removal. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_internal.h"

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

oj_status oj__atomic_write(const char *path, const void *data, size_t len, oj_error *err) {
    char tmp[4096], dir[4096];
    oj_status st = oj__temp_sibling(path, tmp, sizeof tmp, err);
    if (!st) st = oj__dirname(path, dir, sizeof dir, err);
    if (st) return st;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return oj_error_set(err, OJ_ERR_IO, "create %s: %s", tmp, strerror(errno));
    st = oj__write_all(fd, data, len, tmp, err);
    if (!st) st = oj__fsync_fd(fd, tmp, err);
    if (close(fd) != 0 && !st) st = oj_error_set(err, OJ_ERR_IO, "close %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = oj_error_set(err, OJ_ERR_IO, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (st) {
        unlink(tmp);
        return st;
    }
    return oj__fsync_dir(dir, err);
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "something else";
}

int oj__open_regular(const char *path, const char *what, struct stat *sb, oj_error *err) {
    const char *w = what ? what : "", *sp = what ? " " : "";
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        oj_error_set(err, OJ_ERR_IO, "cannot open %s%s%s: %s", w, sp, path, strerror(errno));
        return -1;
    }
    struct stat local;
    if (!sb) sb = &local;
    if (fstat(fd, sb) != 0) {
        oj_error_set(err, OJ_ERR_IO, "cannot stat %s%s%s: %s", w, sp, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        oj_error_set(err, OJ_ERR_IO, "%s%s%s is %s, not a regular file", w, sp, path,
                     file_kind(sb->st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        oj_error_set(err, OJ_ERR_IO, "cannot open %s%s%s: %s", w, sp, path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

FILE *oj__fopen_regular(const char *path, const char *what, oj_error *err) {
    int fd = oj__open_regular(path, what, NULL, err);
    if (fd < 0) return NULL;
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
    struct stat sb;
    int fd = oj__open_regular(path, NULL, &sb, err);
    if (fd < 0) return OJ_ERR_IO;
    if ((uint64_t)sb.st_size > max) {
        close(fd);
        return oj_error_set(err, OJ_ERR_CORRUPT, "%s is %lld bytes, more than the %zu accepted",
                            path, (long long)sb.st_size, max);
    }
    size_t cap = (size_t)sb.st_size;
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
            oj_status st = oj_error_set(err, OJ_ERR_IO, "read %s: %s", path, strerror(errno));
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
