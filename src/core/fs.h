/* File-system steps shared by io, data and train (internal, not installed):
 * full writes, fsync of files and directories, temporary siblings, atomic
 * replacement of a file, mkdir -p, opening regular files for reading,
 * whole-file reads, tree removal. Every function reports through an
 * oj_error (may be NULL) and names the path and the system's reason
 * (strerror) on failure. */
#ifndef OJAS_CORE_FS_H
#define OJAS_CORE_FS_H

#include <stdint.h>
#include <stdio.h>

#include "ojas/core.h"

/* Longest path the helpers build (temporary names, dirname, joins). */
#define OJ__PATH_MAX 4096

/* write(2) all of buf, retrying short writes and EINTR. OJ_ERR_IO. */
oj_status oj__write_all(int fd, const void *buf, size_t len, const char *path, oj_error *err);
/* fsync(2), retrying EINTR. OJ_ERR_IO. */
oj_status oj__fsync_fd(int fd, const char *path, oj_error *err);
/* fsync a directory (so renames and creations in it are durable). OJ_ERR_IO. */
oj_status oj__fsync_dir(const char *dir, oj_error *err);
/* The directory part of path ("." when none, "/" for "/name") into buf.
 * OJ_ERR_OUT_OF_RANGE when it does not fit. */
oj_status oj__dirname(const char *path, char *buf, size_t len, oj_error *err);
/* A unique temporary sibling name "<dir>/.<base>.tmp-<pid>-<n>" (unique
 * across threads and processes). OJ_ERR_INVALID_ARGUMENT when path ends in
 * '/', OJ_ERR_OUT_OF_RANGE when too long. */
oj_status oj__temp_sibling(const char *path, char *buf, size_t len, oj_error *err);
/* snprintf "a/b" into buf; OJ_ERR_OUT_OF_RANGE when truncated. */
oj_status oj__path_join(char *buf, size_t len, const char *a, const char *b, oj_error *err);
/* Create dir and its missing parents (mode 0777 & umask), as mkdir -p; an
 * existing directory is fine. OJ_ERR_IO naming the component that could not
 * be created, or the path when it exists but is not a directory;
 * OJ_ERR_CAPACITY when out of memory. */
oj_status oj__mkdirs(const char *dir, oj_error *err);

/* Atomic replacement of one file: oj__atomic_open creates a temporary
 * sibling (oj__temp_sibling, O_EXCL, mode 0644) and opens `f` on it; the
 * caller writes through `f` (or write(2) on fileno(f)); oj__atomic_commit
 * flushes, fsyncs and closes it, renames it over `path` and fsyncs the
 * directory, so a crash leaves either the old file or the new one, never a
 * mix; on any failure it removes the temporary and leaves `path` as it
 * was. oj__atomic_abort removes the temporary. After commit or abort
 * (whatever commit returned) the struct holds nothing; abort of a struct
 * that open failed on, or that was committed, does nothing. */
typedef struct oj__atomic_file {
    FILE *f;
    char path[OJ__PATH_MAX], tmp[OJ__PATH_MAX];
} oj__atomic_file;

/* OJ_ERR_IO ("create <tmp>: <reason>"), OJ_ERR_OUT_OF_RANGE (path too long). */
oj_status oj__atomic_open(oj__atomic_file *af, const char *path, oj_error *err);
/* OJ_ERR_IO naming the step that failed (write, fsync, close, rename,
 * directory fsync) and the file. */
oj_status oj__atomic_commit(oj__atomic_file *af, oj_error *err);
void oj__atomic_abort(oj__atomic_file *af);
/* Replace `path` with data[0..len) through oj__atomic_open/commit. */
oj_status oj__atomic_write(const char *path, const void *data, size_t len, oj_error *err);

/* Open `path` for reading when it is a regular file. Anything else is
 * refused before a read could block or fail obscurely (a FIFO would wait
 * for a writer, a device may never end, a directory reads as an error): the
 * open is non-blocking (O_CLOEXEC, O_NOCTTY), fstat decides, then the
 * descriptor is made blocking again. `what` (may be NULL) names the file's
 * role in messages ("shard", "corpus file"). On success the caller closes
 * *fd and *size (when size is not NULL) gets the file's size; on failure
 * *fd is -1. OJ_ERR_IO naming the path and what it is ("cannot open
 * <path>: ...", "<path> is a FIFO (named pipe), not a regular file"). Every
 * file reader of the library opens through this or oj__fopen_regular. */
oj_status oj__open_regular(const char *path, const char *what, int *fd, size_t *size,
                           oj_error *err);
/* oj__open_regular as a FILE* in "rb" mode (the caller fcloses it), or NULL
 * with OJ_ERR_IO recorded in err. */
FILE *oj__fopen_regular(const char *path, const char *what, oj_error *err);
/* Read a whole regular file of at most `max` bytes into a malloc'd buffer
 * (NUL appended, not counted; the caller frees *buf). OJ_ERR_IO, or
 * OJ_ERR_CORRUPT when larger than max. */
oj_status oj__read_file(const char *path, size_t max, uint8_t **buf, size_t *len, oj_error *err);
/* Read an open stream f (a pipe, stdin, a file) to its end into a malloc'd
 * buffer (NUL appended, not counted; the caller frees *buf; f stays open).
 * `name` names the stream in messages. OJ_ERR_CAPACITY ("read <name>: out of
 * host memory") or OJ_ERR_IO ("read <name>: read error"), *buf NULL then. */
oj_status oj__read_stream(FILE *f, const char *name, char **buf, size_t *len, oj_error *err);
/* Remove a directory tree (no symlinks followed); a missing path is fine. */
oj_status oj__rmtree(const char *path, oj_error *err);

#endif /* OJAS_CORE_FS_H */
