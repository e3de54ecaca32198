/* Reference-counted file bytes: a private mmap of a file, a heap copy, or
 * borrowed memory. Zero-copy tensors hold a reference, so the file stays
 * mapped until the last of them is released. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_internal.h"

oj_status oj__map_file(const char *path, oj__mapping **out, oj_error *err) {
    *out = NULL;
    int fd;
    size_t size;
    oj_status st = oj__open_regular(path, NULL, &fd, &size, err);
    if (st) return st;
    oj__mapping *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return oj_error_set(err, OJ_ERR_CAPACITY, "map %s: out of host memory", path);
    }
    atomic_init(&m->refcount, 1);
    m->kind = OJ__MAP_MMAP;
    m->len = size;
    if (m->len > 0) {
        /* Private and writable: a tensor written in place copies its pages
         * and never changes the file. */
        void *p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            st = oj_error_set(err, OJ_ERR_IO, "mmap %s (%zu bytes): %s", path, m->len,
                              strerror(errno));
            free(m);
            close(fd);
            return st;
        }
        m->base = p;
    }
    close(fd);
    *out = m;
    return OJ_OK;
}

oj_status oj__map_memory(const void *data, size_t len, bool copy, oj__mapping **out,
                         oj_error *err) {
    *out = NULL;
    oj__mapping *m = calloc(1, sizeof *m);
    if (!m) return oj_error_set(err, OJ_ERR_CAPACITY, "out of host memory");
    atomic_init(&m->refcount, 1);
    m->len = len;
    if (copy) {
        m->kind = OJ__MAP_HEAP;
        m->base = malloc(len ? len : 1);
        if (!m->base) {
            free(m);
            return oj_error_set(err, OJ_ERR_CAPACITY, "copy of %zu bytes: out of host memory", len);
        }
        if (len) memcpy(m->base, data, len);
    } else {
        m->kind = OJ__MAP_BORROWED;
        m->base = (uint8_t *)data;
    }
    *out = m;
    return OJ_OK;
}

void oj__map_retain(oj__mapping *m) {
    atomic_fetch_add(&m->refcount, 1);
}

void oj__map_release(oj__mapping *m) {
    if (!m || atomic_fetch_sub(&m->refcount, 1) != 1) return;
    if (m->kind == OJ__MAP_MMAP && m->len > 0) munmap(m->base, m->len);
    if (m->kind == OJ__MAP_HEAP) free(m->base);
    free(m);
}
