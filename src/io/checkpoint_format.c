/* The checkpoint format in memory: manifest.json and state.json text, the
 * directory and `latest` names, and the validation of a checkpoint's four
 * files against each other and against the tensors it must fill. Pure
 * functions over bytes, so the fuzz target drives them directly. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_internal.h"

const char *const oj__ckpt_files[OJ__CKPT_NFILES] = {"model.safetensors", "optimizer.safetensors",
                                                     "state.json"};

/* ---------------------------------------------------------------- names */

void oj__ckpt_dirname(int64_t step, char buf[32]) {
    snprintf(buf, 32, "ckpt-%06" PRId64, step);
}

bool oj__ckpt_parse_dirname(const char *name, size_t len, int64_t *step) {
    if (len < 11 || len > 24 || memcmp(name, "ckpt-", 5) != 0) return false; /* 19 digits */
    int64_t v = 0;
    for (size_t i = 5; i < len; i++) {
        if (name[i] < '0' || name[i] > '9') return false;
        int d = name[i] - '0';
        if (v > (INT64_MAX - d) / 10) return false; /* exact: every step save accepts parses */
        v = v * 10 + d;
    }
    char canon[32];
    oj__ckpt_dirname(v, canon);
    if (strlen(canon) != len || memcmp(canon, name, len) != 0) return false;
    *step = v;
    return true;
}

bool oj__ckpt_parse_latest(const uint8_t *buf, size_t len, int64_t *step) {
    if (len > 0 && buf[len - 1] == '\n') len--;
    return oj__ckpt_parse_dirname((const char *)buf, len, step);
}

/* ---------------------------------------------------------------- writing */

oj_status oj__ckpt_state_text(int64_t step, const char *caller_json, char **out, oj_error *err) {
    *out = NULL;
    json_t *user = NULL;
    if (caller_json) {
        json_error_t je;
        user = json_loads(caller_json, JSON_REJECT_DUPLICATES, &je);
        if (!user)
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "checkpoint state: not valid JSON at byte %d: %s", je.position, je.text);
        if (!json_is_object(user)) {
            json_decref(user);
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "checkpoint state: not a JSON object");
        }
        if (json_object_get(user, "step") || json_object_get(user, "ojas_version")) {
            json_decref(user);
            return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT,
                                "checkpoint state: keys \"step\" and \"ojas_version\" are reserved");
        }
    }
    json_t *root = json_object();
    int bad = !root;
    if (!bad) bad |= json_object_set_new(root, "step", json_integer(step));
    if (!bad) bad |= json_object_set_new(root, "ojas_version", json_string(OJ_VERSION_STRING));
    if (!bad && user) bad |= json_object_update(root, user);
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    json_decref(user);
    if (!text) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint state: out of host memory");
    *out = text;
    return OJ_OK;
}

oj_status oj__ckpt_manifest_text(int64_t step, const uint64_t bytes[OJ__CKPT_NFILES],
                                 const uint64_t hashes[OJ__CKPT_NFILES], char **out,
                                 oj_error *err) {
    *out = NULL;
    json_t *root = json_object(), *files = json_object();
    int bad = !root || !files;
    if (!bad) bad |= json_object_set_new(root, "format", json_string(OJ__CKPT_FORMAT));
    if (!bad) bad |= json_object_set_new(root, "format_version", json_integer(OJ__CKPT_FORMAT_VERSION));
    if (!bad) bad |= json_object_set_new(root, "step", json_integer(step));
    for (int f = 0; f < OJ__CKPT_NFILES && !bad; f++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, hashes[f]);
        json_t *e = json_pack("{s:I,s:s}", "bytes", (json_int_t)bytes[f], "xxh3_64", hex);
        bad |= json_object_set_new(files, oj__ckpt_files[f], e);
    }
    if (!bad) {
        bad |= json_object_set(root, "files", files);
    }
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(2));
    json_decref(files);
    json_decref(root);
    if (!text) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint manifest: out of host memory");
    *out = text;
    return OJ_OK;
}

/* ---------------------------------------------------------------- reading */

static oj_status corrupt(oj_error *err, const char *file, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static oj_status corrupt(oj_error *err, const char *file, const char *fmt, ...) {
    char msg[440];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return oj_error_set(err, OJ_ERR_CORRUPT, "checkpoint %s: %s", file, msg);
}

/* Parse a JSON object from untrusted bytes (duplicates refused). */
static oj_status load_object(const uint8_t *buf, size_t len, const char *file, json_t **out,
                             oj_error *err) {
    json_error_t je;
    size_t at;
    *out = NULL;
    if (!oj__utf8_valid(buf, len, &at)) return corrupt(err, file, "byte %zu is not UTF-8", at);
    json_t *j = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return corrupt(err, file, "not valid JSON at byte %d: %s", je.position, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return corrupt(err, file, "not a JSON object");
    }
    *out = j;
    return OJ_OK;
}

/* Every key of obj is one of the NULL-terminated `keys`, and all are there. */
static oj_status exact_keys(const json_t *obj, const char *const *keys, const char *file,
                            const char *where, oj_error *err) {
    char q[160];
    const char *k;
    json_t *v;
    size_t n = 0;
    json_object_foreach((json_t *)obj, k, v) {
        size_t i = 0;
        while (keys[i] && strcmp(keys[i], k)) i++;
        if (!keys[i])
            return corrupt(err, file, "unknown key %s in %s", oj__quote(q, sizeof q, k, strlen(k)),
                           where);
    }
    for (; keys[n]; n++)
        if (!json_object_get(obj, keys[n]))
            return corrupt(err, file, "missing key \"%s\" in %s", keys[n], where);
    return OJ_OK;
}

static bool hex64(const json_t *v, uint64_t *out) {
    if (!json_is_string(v) || json_string_length(v) != 16) return false;
    const char *s = json_string_value(v);
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        h = (h << 4) | (uint64_t)d;
    }
    *out = h;
    return true;
}

static oj_status check_manifest(const oj__ckpt_bytes *b, bool check_hashes, int64_t *step,
                                oj_error *err) {
    static const char *const top[] = {"format", "format_version", "step", "files", NULL};
    static const char *const entry[] = {"bytes", "xxh3_64", NULL};
    const char *file = OJ__CKPT_MANIFEST;
    json_t *m;
    oj_status rc = load_object(b->manifest, b->manifest_len, file, &m, err);
    if (rc) return rc;
    rc = exact_keys(m, top, file, "the manifest", err);
    json_t *v;
    if (!rc) {
        v = json_object_get(m, "format");
        if (!json_is_string(v) || strcmp(json_string_value(v), OJ__CKPT_FORMAT))
            rc = corrupt(err, file, "format is not \"%s\"", OJ__CKPT_FORMAT);
    }
    if (!rc) {
        v = json_object_get(m, "format_version");
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            rc = corrupt(err, file, "format_version is not a positive integer");
        else if (json_integer_value(v) != OJ__CKPT_FORMAT_VERSION)
            rc = oj_error_set(err, OJ_ERR_UNSUPPORTED,
                              "checkpoint %s: format_version %" JSON_INTEGER_FORMAT
                              " (this ojas reads %d)",
                              file, json_integer_value(v), OJ__CKPT_FORMAT_VERSION);
    }
    if (!rc) {
        v = json_object_get(m, "step");
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            rc = corrupt(err, file, "step is not a non-negative integer");
        else
            *step = json_integer_value(v);
    }
    json_t *files = json_object_get(m, "files");
    if (!rc && !json_is_object(files)) rc = corrupt(err, file, "files is not an object");
    const char *const file_keys[] = {oj__ckpt_files[0], oj__ckpt_files[1], oj__ckpt_files[2], NULL};
    if (!rc) rc = exact_keys(files, file_keys, file, "files", err);
    const size_t lens[OJ__CKPT_NFILES] = {b->model_len, b->optim_len, b->state_len};
    const uint8_t *data[OJ__CKPT_NFILES] = {b->model, b->optim, b->state};
    for (int f = 0; f < OJ__CKPT_NFILES && !rc; f++) {
        const char *name = oj__ckpt_files[f];
        char where[64];
        snprintf(where, sizeof where, "files.%s", name);
        json_t *e = json_object_get(files, name);
        if (!json_is_object(e)) {
            rc = corrupt(err, file, "%s is not an object", where);
            break;
        }
        rc = exact_keys(e, entry, file, where, err);
        if (rc) break;
        json_t *jb = json_object_get(e, "bytes");
        uint64_t want_hash;
        if (!json_is_integer(jb) || json_integer_value(jb) < 0) {
            rc = corrupt(err, file, "%s.bytes is not a non-negative integer", where);
        } else if (!hex64(json_object_get(e, "xxh3_64"), &want_hash)) {
            rc = corrupt(err, file, "%s.xxh3_64 is not 16 lower-case hex digits", where);
        } else if (check_hashes && (uint64_t)json_integer_value(jb) != lens[f]) {
            rc = oj_error_set(err, OJ_ERR_CORRUPT,
                              "checkpoint %s: %zu bytes, the manifest says %" JSON_INTEGER_FORMAT
                              " (truncated or torn write)",
                              name, lens[f], json_integer_value(jb));
        } else if (check_hashes) {
            uint64_t got = oj__xxh3(data[f], lens[f]);
            if (got != want_hash)
                rc = oj_error_set(err, OJ_ERR_CORRUPT,
                                  "checkpoint %s: XXH3-64 %016" PRIx64
                                  " does not match the manifest's %016" PRIx64 " (corrupt file)",
                                  name, got, want_hash);
        }
    }
    json_decref(m);
    return rc;
}

static oj_status check_state(const oj__ckpt_bytes *b, int64_t step, char **state_json,
                             oj_error *err) {
    const char *file = oj__ckpt_files[OJ__CKPT_STATE];
    json_t *s;
    oj_status rc = load_object(b->state, b->state_len, file, &s, err);
    if (rc) return rc;
    json_t *v = json_object_get(s, "step");
    if (!json_is_integer(v))
        rc = corrupt(err, file, "\"step\" is missing or not an integer");
    else if (json_integer_value(v) != step)
        rc = corrupt(err, file, "step %" JSON_INTEGER_FORMAT " differs from the manifest's %" PRId64,
                     json_integer_value(v), step);
    else if (!json_is_string(json_object_get(s, "ojas_version")))
        rc = corrupt(err, file, "\"ojas_version\" is missing or not a string");
    json_decref(s);
    if (!rc && state_json) {
        char *t = malloc(b->state_len + 1);
        if (!t) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint state: out of host memory");
        if (b->state_len) memcpy(t, b->state, b->state_len);
        t[b->state_len] = '\0';
        *state_json = t;
    }
    return rc;
}

static void shape_text(char *buf, size_t len, oj_dtype dt, int rank, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, len, "%s [", oj_dtype_name(dt));
    for (int d = 0; d < rank && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The file holds exactly the expected tensors, with their dtypes and shapes. */
static oj_status check_expect(const oj_safetensors *st, const oj__expect *ex, const char *file,
                              oj_error *err) {
    char q[160], want[160], got[160];
    for (int64_t i = 0; i < ex->n; i++) {
        const char *name = ex->names[i];
        oj__quote(q, sizeof q, name, strlen(name));
        shape_text(want, sizeof want, ex->dtypes[i], ex->ranks[i], ex->shapes[i]);
        int64_t k = oj_safetensors_find(st, name);
        if (k < 0)
            return oj_error_set(err, OJ_ERR_SHAPE, "checkpoint %s: no tensor %s (expected %s)", file,
                                q, want);
        oj_dtype dt = oj_safetensors_dtype(st, k);
        int rank = oj_safetensors_rank(st, k);
        const int64_t *shape = oj_safetensors_shape(st, k);
        if (dt != ex->dtypes[i])
            return oj_error_set(err, OJ_ERR_DTYPE, "checkpoint %s: tensor %s is %s, expected %s",
                                file, q, oj_safetensors_dtype_str(st, k), want);
        bool same = rank == ex->ranks[i];
        for (int d = 0; same && d < rank; d++) same = shape[d] == ex->shapes[i][d];
        if (!same) {
            shape_text(got, sizeof got, dt, rank > OJ_MAX_RANK ? OJ_MAX_RANK : rank, shape);
            return oj_error_set(err, OJ_ERR_SHAPE, "checkpoint %s: tensor %s is %s, expected %s",
                                file, q, got, want);
        }
    }
    if (oj_safetensors_count(st) == ex->n) return OJ_OK;
    /* more tensors in the file than expected: name the first extra one */
    const char **sorted = malloc((size_t)(ex->n ? ex->n : 1) * sizeof *sorted);
    if (!sorted) return oj_error_set(err, OJ_ERR_CAPACITY, "checkpoint: out of host memory");
    if (ex->n) memcpy(sorted, ex->names, (size_t)ex->n * sizeof *sorted);
    qsort(sorted, (size_t)ex->n, sizeof *sorted, cmp_cstr);
    const char *extra = NULL;
    for (int64_t k = 0; k < oj_safetensors_count(st) && !extra; k++) {
        const char *name = oj_safetensors_name(st, k);
        if (!bsearch(&name, sorted, (size_t)ex->n, sizeof *sorted, cmp_cstr)) extra = name;
    }
    free(sorted);
    return oj_error_set(err, OJ_ERR_SHAPE, "checkpoint %s: tensor %s is not among the %" PRId64
                                           " expected",
                        file, extra ? oj__quote(q, sizeof q, extra, strlen(extra)) : "?", ex->n);
}

static oj_status parse_st(const uint8_t *buf, size_t len, const char *file, const oj__expect *ex,
                          oj_safetensors **out, oj_error *err) {
    oj__mapping *m;
    oj_safetensors *st = NULL;
    oj_status rc = oj__map_memory(buf, len, false, &m, err);
    if (rc) return rc;
    rc = oj__st_parse(m, file, &st, err);
    oj__map_release(m);
    if (!rc && ex) rc = check_expect(st, ex, file, err);
    if (rc || !out) {
        oj_safetensors_close(st);
        return rc;
    }
    *out = st;
    return OJ_OK;
}

oj_status oj__ckpt_validate(const oj__ckpt_bytes *b, bool check_hashes, const oj__expect *model,
                            const oj__expect *optim, int64_t *step, char **state_json,
                            oj_safetensors **model_st, oj_safetensors **optim_st,
                            oj_error *err) {
    int64_t s = -1;
    char *state = NULL;
    oj_safetensors *ms = NULL;
    if (state_json) *state_json = NULL;
    if (model_st) *model_st = NULL;
    if (optim_st) *optim_st = NULL;
    oj_status rc = check_manifest(b, check_hashes, &s, err);
    if (!rc) rc = check_state(b, s, state_json ? &state : NULL, err);
    if (!rc) rc = parse_st(b->model, b->model_len, oj__ckpt_files[OJ__CKPT_MODEL], model,
                           model_st ? &ms : NULL, err);
    if (!rc) rc = parse_st(b->optim, b->optim_len, oj__ckpt_files[OJ__CKPT_OPTIM], optim, optim_st,
                           err);
    if (rc) {
        free(state);
        oj_safetensors_close(ms);
        return rc;
    }
    if (step) *step = s;
    if (state_json) *state_json = state;
    if (model_st) *model_st = ms;
    return OJ_OK;
}
