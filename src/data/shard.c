/* llm.c token shards: 256 x int32 header (magic 20240520, version, count)
 * then uint16 (version 1) or uint32 (version 2) tokens, little-endian.
 * Writer (temporary file + rename) and mmap reader that validates. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "ojas/data.h"

struct oj_shard {
    char *path; /* for messages */
    void *map;
    size_t map_len;
    const uint8_t *tokens;
    int64_t len;
    int version;
    dev_t dev; /* the mapped file's identity, to tell it truncated from replaced */
    ino_t ino;
};

oj_status oj_shard_write(const char *path, const int32_t *tokens, int64_t n, int version,
                         oj_error *err) {
    if (!path || (n && !tokens) || n < 0)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "shard_write: NULL path or tokens");
    if (version != 1 && version != 2)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "shard_write %s: version %d, expected 1 (uint16) or 2 (uint32)", path,
                            version);
    if (n > INT32_MAX)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                            "shard_write %s: %lld tokens exceed the header's int32 count", path,
                            (long long)n);
    int64_t limit = version == 1 ? 65535 : INT32_MAX;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > limit)
            return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                                "shard_write %s: token %d at %lld does not fit version %d", path,
                                (int)tokens[i], (long long)i, version);
    oj__atomic_file af;
    oj_status st = oj__atomic_open(&af, path, err);
    if (st)
        return st;
    int32_t header[256] = {OJ_SHARD_MAGIC, version, (int32_t)n};
    fwrite(header, sizeof header, 1, af.f);
    enum { CH = 8192 };
    uint16_t b16[CH];
    uint32_t b32[CH];
    for (int64_t i = 0; i < n; i += CH) {
        int64_t m = n - i < CH ? n - i : CH;
        for (int64_t k = 0; k < m; k++) {
            if (version == 1)
                b16[k] = (uint16_t)tokens[i + k];
            else
                b32[k] = (uint32_t)tokens[i + k];
        }
        if (version == 1)
            fwrite(b16, 2, (size_t)m, af.f);
        else
            fwrite(b32, 4, (size_t)m, af.f);
    }
    return oj__atomic_commit(&af, err);
}

oj_status oj_shard_open(const char *path, oj_shard **out, oj_error *err) {
    if (!path || !out)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "shard_open: NULL argument");
    *out = NULL;
    int fd;
    size_t size;
    oj_status st = oj__open_regular(path, "shard", &fd, &size, err);
    if (st)
        return st;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = oj_error_set(err, OJ_ERR_IO, "shard %s: stat: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (size < OJ_SHARD_HEADER_BYTES) {
        close(fd);
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "shard %s: %zu bytes, shorter than the 1024-byte header (truncated)",
                            path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return oj_error_set(err, OJ_ERR_IO, "shard %s: mmap: %s", path, strerror(errno));
    int32_t h[256];
    memcpy(h, map, sizeof h);
    size_t width = h[1] == 1 ? 2 : 4;
    int reserved = 3; /* the first header int past the count that is not 0 */
    while (reserved < 256 && h[reserved] == 0)
        reserved++;
    if (h[0] != OJ_SHARD_MAGIC)
        st = oj_error_set(err, OJ_ERR_CORRUPT, "shard %s: magic %d, expected %d", path, (int)h[0],
                          OJ_SHARD_MAGIC);
    else if (h[1] != 1 && h[1] != 2)
        st = oj_error_set(err, OJ_ERR_CORRUPT, "shard %s: version %d, expected 1 or 2", path,
                          (int)h[1]);
    else if (h[2] < 0)
        st = oj_error_set(err, OJ_ERR_CORRUPT, "shard %s: negative token count %d", path, (int)h[2]);
    else if (reserved < 256)
        st = oj_error_set(err, OJ_ERR_CORRUPT,
                          "shard %s: header int %d (byte offset %d) is %d; ints 3..255 are reserved "
                          "and must be 0",
                          path, reserved, reserved * 4, (int)h[reserved]);
    else if (size != OJ_SHARD_HEADER_BYTES + (size_t)h[2] * width)
        st = oj_error_set(err, OJ_ERR_CORRUPT,
                          "shard %s: header says %d tokens (%zu bytes) but the file holds %zu "
                          "bytes of tokens (%s)",
                          path, (int)h[2], (size_t)h[2] * width, size - OJ_SHARD_HEADER_BYTES,
                          size < OJ_SHARD_HEADER_BYTES + (size_t)h[2] * width ? "truncated"
                                                                                 : "trailing bytes");
    oj_shard *s = st ? NULL : calloc(1, sizeof *s);
    if (!st && (!s || !(s->path = strdup(path)))) {
        free(s);
        st = oj_error_set(err, OJ_ERR_CAPACITY, "shard %s: out of memory", path);
    }
    if (st) {
        munmap(map, size);
        return st;
    }
    madvise(map, size, MADV_WILLNEED);
    s->map = map;
    s->map_len = size;
    s->tokens = (const uint8_t *)map + OJ_SHARD_HEADER_BYTES;
    s->len = h[2];
    s->version = h[1];
    s->dev = sb.st_dev;
    s->ino = sb.st_ino;
    *out = s;
    return OJ_OK;
}

void oj_shard_close(oj_shard *s) {
    if (!s)
        return;
    munmap(s->map, s->map_len);
    free(s->path);
    free(s);
}

/* The largest token of p[0..n) (uint16 or uint32 by width): a loop without
 * branches that compilers vectorise, so the scan runs near memory speed. */
static uint32_t max_token(const uint8_t *p, int64_t n, int width) {
    uint32_t m = 0;
    if (width == 2) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, p + (size_t)i * 2, 2);
            m = v > m ? v : m;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, p + (size_t)i * 4, 4);
            m = v > m ? v : m;
        }
    }
    return m;
}

oj_status oj_shard_check_vocab(const oj_shard *s, int64_t vocab_size, oj_error *err) {
    if (!s || vocab_size < 1)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                            "shard_check_vocab: NULL shard or vocab_size %lld < 1",
                            (long long)vocab_size);
    const int width = s->version == 1 ? 2 : 4;
    if ((int64_t)(width == 2 ? 65535 : UINT32_MAX) < vocab_size)
        return OJ_OK; /* every value the version can hold is a valid id */
    enum { CHUNK = 1 << 16 };
    for (int64_t at = 0; at < s->len; at += CHUNK) {
        int64_t n = s->len - at < CHUNK ? s->len - at : CHUNK;
        const uint8_t *p = s->tokens + (size_t)at * (size_t)width;
        if ((int64_t)max_token(p, n, width) < vocab_size)
            continue;
        for (int64_t i = 0; i < n; i++) { /* the first one, for the message */
            uint32_t v = 0;
            memcpy(&v, p + (size_t)i * (size_t)width, (size_t)width); /* little-endian host */
            if ((int64_t)v >= vocab_size)
                return oj_error_set(err, OJ_ERR_CORRUPT,
                                    "shard %s: token %lld (byte offset %lld) is id %lu, outside "
                                    "the vocabulary of %lld",
                                    s->path, (long long)(at + i),
                                    (long long)(OJ_SHARD_HEADER_BYTES + (at + i) * width),
                                    (unsigned long)v, (long long)vocab_size);
        }
    }
    return OJ_OK;
}

int64_t oj_shard_len(const oj_shard *s) { return s ? s->len : 0; }
int oj_shard_version(const oj_shard *s) { return s ? s->version : 0; }

oj_status oj_shard_read(const oj_shard *s, int64_t start, int64_t n, int32_t *dst, oj_error *err) {
    if (!s || (n && !dst))
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "shard_read: NULL argument");
    if (start < 0 || n < 0 || start > s->len || n > s->len - start)
        return oj_error_set(err, OJ_ERR_OUT_OF_RANGE,
                            "shard_read: %lld tokens from %lld are outside the shard's %lld",
                            (long long)n, (long long)start, (long long)s->len);
    /* The mapped file truncated since it was opened (data rewritten in
     * place during a run): its pages past the new end would raise SIGBUS,
     * those before it in its last page read as zeros. A file replaced by
     * a rename is another inode; the mapping keeps the old one's tokens.
     * A truncation between this check and the copy still faults. */
    struct stat sb;
    if (stat(s->path, &sb) == 0 && sb.st_dev == s->dev && sb.st_ino == s->ino &&
        (uint64_t)sb.st_size < (uint64_t)s->map_len)
        return oj_error_set(err, OJ_ERR_IO,
                            "shard %s: the file is now %lld bytes, shorter than the %zu it had when "
                            "it was opened (truncated while in use)",
                            s->path, (long long)sb.st_size, s->map_len);
    if (s->version == 1) {
        const uint8_t *p = s->tokens + (size_t)start * 2;
        for (int64_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, p + (size_t)i * 2, 2);
            dst[i] = v;
        }
    } else {
        const uint8_t *p = s->tokens + (size_t)start * 4;
        for (int64_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, p + (size_t)i * 4, 4);
            dst[i] = v > INT32_MAX ? -1 : (int32_t)v;
        }
    }
    return OJ_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void oj_paths_free(char **paths, int n) {
    if (!paths)
        return;
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

oj_status oj_shard_list(const char *dir, const char *split, char ***paths, int *n, oj_error *err) {
    if (!dir || !split || !paths || !n)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "shard_list: NULL argument");
    *paths = NULL;
    *n = 0;
    size_t ml = strlen(dir) + sizeof OJ_PREPARE_INCOMPLETE + 1;
    char *mark = malloc(ml);
    if (!mark) return oj_error_set(err, OJ_ERR_CAPACITY, "shard_list: out of memory");
    snprintf(mark, ml, "%s/%s", dir, OJ_PREPARE_INCOMPLETE);
    struct stat sb;
    const bool unfinished = stat(mark, &sb) == 0;
    free(mark);
    if (unfinished)
        return oj_error_set(err, OJ_ERR_CORRUPT,
                            "shard_list: %s holds %s: an ojas data prepare into it did not finish "
                            "(killed or failed); prepare it again",
                            dir, OJ_PREPARE_INCOMPLETE);
    DIR *d = opendir(dir);
    if (!d)
        return oj_error_set(err, OJ_ERR_IO, "shard_list: cannot open the data directory %s: %s", dir,
                            strerror(errno));
    size_t sl = strlen(split), dl = strlen(dir);
    char **v = NULL;
    int cnt = 0, cap = 0;
    struct dirent *de;
    oj_status st = OJ_OK;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t nl = strlen(nm);
        if (nl < sl + 5 || strncmp(nm, split, sl) != 0 || nm[sl] != '_' ||
            strcmp(nm + nl - 4, ".bin") != 0)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            char **g = realloc(v, (size_t)cap * sizeof *g);
            if (!g) {
                st = OJ_ERR_CAPACITY;
                break;
            }
            v = g;
        }
        v[cnt] = malloc(dl + nl + 2);
        if (!v[cnt]) {
            st = OJ_ERR_CAPACITY;
            break;
        }
        snprintf(v[cnt], dl + nl + 2, "%s/%s", dir, nm);
        cnt++;
    }
    closedir(d);
    if (st) {
        oj_paths_free(v, cnt);
        return oj_error_set(err, st, "shard_list: out of memory");
    }
    if (cnt == 0) {
        free(v);
        return oj_error_set(err, OJ_ERR_IO, "shard_list: no %s_*.bin shards in %s", split, dir);
    }
    qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    *paths = v;
    *n = cnt;
    return OJ_OK;
}
