/* OpenAI request bodies (serve.h, oj_serve_request_parse) and chat
 * templates (oj_chat_template_detect, oj_chat_render), with jansson. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ojas/serve.h"

/* The message into err[0..n), each control character (< 0x20, 0x7f) as
 * '?': a value quoted from the request keeps it on one line. */
static oj_status bad(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    for (char *p = err; p && n && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return OJ_ERR_INVALID_ARGUMENT;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

void oj_serve_request_free(oj_serve_request *r) {
    if (r == NULL) return;
    free(r->prompt);
    free(r->prompt_ids);
    for (int64_t i = 0; i < r->n_messages; i++) {
        free(r->roles[i]);
        free(r->contents[i]);
    }
    free(r->roles);
    free(r->contents);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* d in the fewest significant digits that read back as d (2.0000001, not
 * %g's 2). */
static const char *shortest(double d, char *buf, size_t n) {
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, d);
        if (strtod(buf, NULL) == d) break;
    }
    return buf;
}

/* Field `key` of o as a number in [lo, hi] into *out (absent: unchanged). */
static oj_status get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err,
                         size_t n) {
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return OJ_OK;
    if (!json_is_number(v)) return bad(err, n, "'%s' must be a number", key);
    double d = json_number_value(v);
    char ds[32];
    if (!(d >= lo && d <= hi))
        return bad(err, n, "'%s' is %s, outside [%g, %g]", key, shortest(d, ds, sizeof ds), lo, hi);
    *out = d;
    return OJ_OK;
}

static oj_status get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                         char *err, size_t n) {
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return OJ_OK;
    if (!json_is_integer(v)) return bad(err, n, "'%s' must be an integer", key);
    json_int_t d = json_integer_value(v);
    if (d < lo || d > hi)
        return bad(err, n, "'%s' is %lld, outside [%lld, %lld]", key, (long long)d, (long long)lo,
                   (long long)hi);
    *out = (int64_t)d;
    return OJ_OK;
}

static oj_status get_bool(json_t *o, const char *key, bool *out, char *err, size_t n) {
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) return OJ_OK;
    if (!json_is_boolean(v)) return bad(err, n, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return OJ_OK;
}

static oj_status parse_stop(json_t *o, oj_serve_request *r, char *err, size_t n) {
    json_t *v = json_object_get(o, "stop");
    if (v == NULL || json_is_null(v)) return OJ_OK;
    json_t *one[1] = {v};
    size_t cnt = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return bad(err, n, "'stop' must be a string or an array of up to 4 strings");
    if (cnt > 4) return bad(err, n, "'stop' has %zu strings, at most 4 are allowed", cnt);
    for (size_t i = 0; i < cnt; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s) || json_string_length(s) == 0)
            return bad(err, n, "'stop' entry %zu must be a non-empty string", i);
        r->stop[r->n_stop] = dup_n(json_string_value(s), json_string_length(s));
        if (r->stop[r->n_stop] == NULL) return OJ_ERR_CAPACITY;
        r->n_stop++;
    }
    return OJ_OK;
}

static oj_status parse_prompt(json_t *o, oj_serve_request *r, char *err, size_t n) {
    json_t *p = json_object_get(o, "prompt");
    if (p == NULL) return bad(err, n, "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0); /* ["text"]: one prompt */
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return bad(err, n, "'prompt' is empty");
        r->prompt = dup_n(json_string_value(p), json_string_length(p));
        return r->prompt ? OJ_OK : OJ_ERR_CAPACITY;
    }
    if (json_is_array(p)) {
        size_t cnt = json_array_size(p);
        if (cnt == 0) return bad(err, n, "'prompt' is empty");
        r->prompt_ids = malloc(cnt * sizeof *r->prompt_ids);
        if (r->prompt_ids == NULL) return OJ_ERR_CAPACITY;
        for (size_t i = 0; i < cnt; i++) {
            json_t *t = json_array_get(p, i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) > INT32_MAX)
                return bad(err, n,
                           "'prompt' must be a string or an array of token ids (entry %zu is not "
                           "an integer in [0, 2^31)); batches of prompts are not supported",
                           i);
            r->prompt_ids[i] = (int32_t)json_integer_value(t);
        }
        r->n_prompt_ids = (int64_t)cnt;
        return OJ_OK;
    }
    return bad(err, n, "'prompt' must be a string or an array of token ids");
}

static oj_status parse_messages(json_t *o, oj_serve_request *r, char *err, size_t n) {
    json_t *m = json_object_get(o, "messages");
    if (m == NULL) return bad(err, n, "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad(err, n, "'messages' must be a non-empty array");
    size_t cnt = json_array_size(m);
    if (cnt > 4096) return bad(err, n, "'messages' has %zu entries, at most 4096", cnt);
    r->roles = calloc(cnt, sizeof *r->roles);
    r->contents = calloc(cnt, sizeof *r->contents);
    if (r->roles == NULL || r->contents == NULL) return OJ_ERR_CAPACITY;
    for (size_t i = 0; i < cnt; i++) {
        json_t *e = json_array_get(m, i);
        json_t *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        if (!json_is_object(e) || !json_is_string(role))
            return bad(err, n, "'messages[%zu]' must be an object with a string 'role'", i);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
            strcmp(rs, "developer"))
            return bad(err, n, "'messages[%zu].role' is '%.32s'; system, developer, user or "
                               "assistant are supported", i, rs);
        if (!json_is_string(content))
            return bad(err, n, "'messages[%zu].content' must be a string", i);
        r->roles[i] = dup_n(rs, strlen(rs));
        r->contents[i] = dup_n(json_string_value(content), json_string_length(content));
        r->n_messages = (int64_t)i + 1;
        if (r->roles[i] == NULL || r->contents[i] == NULL) return OJ_ERR_CAPACITY;
    }
    return OJ_OK;
}

oj_status oj_serve_request_parse(const char *body, size_t len, bool chat, oj_serve_request *r,
                                 char *err, size_t errlen) {
    if (r == NULL) return OJ_ERR_INVALID_ARGUMENT;
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->max_tokens = chat ? -1 : 16; /* OpenAI's defaults: 16, chat: up to the context */
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->n = 1;
    r->logprobs = -1;
    if (body == NULL) return bad(err, errlen, "the request has no body");
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (o == NULL)
        return bad(err, errlen, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                   je.line, je.column);
    oj_status st = OJ_OK;
    if (!json_is_object(o)) {
        st = bad(err, errlen, "the body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        st = bad(err, errlen, "'model' must be a string");
        goto out;
    }
    if (json_is_string(model) && json_string_length(model) >= sizeof r->model) {
        st = bad(err, errlen, "'model' is longer than %zu bytes", sizeof r->model - 1);
        goto out;
    }
    if (json_is_string(model))
        snprintf(r->model, sizeof r->model, "%s", json_string_value(model));
    st = chat ? parse_messages(o, r, err, errlen) : parse_prompt(o, r, err, errlen);
    double top_k = 0;
    if (st == OJ_OK) st = get_int(o, "max_tokens", 0, 1 << 24, &r->max_tokens, err, errlen);
    if (st == OJ_OK && chat)
        st = get_int(o, "max_completion_tokens", 0, 1 << 24, &r->max_tokens, err, errlen);
    if (st == OJ_OK) st = get_num(o, "temperature", 0.0, 2.0, &r->temperature, err, errlen);
    if (st == OJ_OK) st = get_num(o, "top_p", 0.0, 1.0, &r->top_p, err, errlen);
    if (st == OJ_OK) st = get_num(o, "top_k", 0.0, 1e9, &top_k, err, errlen);
    if (st == OJ_OK && top_k != floor(top_k)) st = bad(err, errlen, "'top_k' must be an integer");
    r->top_k = (int64_t)top_k;
    if (st == OJ_OK) st = get_int(o, "n", 1, 16, &r->n, err, errlen);
    int64_t seed = 0;
    json_t *sv = json_object_get(o, "seed");
    r->has_seed = sv && !json_is_null(sv);
    if (st == OJ_OK) st = get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, err, errlen);
    r->seed = (uint64_t)seed;
    if (st == OJ_OK) st = get_bool(o, "stream", &r->stream, err, errlen);
    json_t *so = json_object_get(o, "stream_options"); /* OpenAI: {"include_usage": bool} */
    if (st == OJ_OK && so && !json_is_null(so)) {
        if (!json_is_object(so))
            st = bad(err, errlen, "'stream_options' must be an object");
        else if (!r->stream)
            st = bad(err, errlen, "'stream_options' needs 'stream': true");
        else
            st = get_bool(so, "include_usage", &r->include_usage, err, errlen);
    }
    if (st == OJ_OK) st = parse_stop(o, r, err, errlen);
    if (st == OJ_OK && chat) { /* logprobs: bool; top_logprobs: 0..20 */
        bool lp = false;
        int64_t top = 0;
        st = get_bool(o, "logprobs", &lp, err, errlen);
        r->logprobs = lp ? 0 : -1;
        if (st == OJ_OK) st = get_int(o, "top_logprobs", 0, 20, &top, err, errlen);
        if (st == OJ_OK && !lp && json_object_get(o, "top_logprobs") &&
            !json_is_null(json_object_get(o, "top_logprobs")))
            st = bad(err, errlen, "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)top;
    } else if (st == OJ_OK) { /* logprobs: 0..5, the alternatives per token */
        int64_t lp = -1;
        st = get_int(o, "logprobs", 0, 5, &lp, err, errlen);
        r->logprobs = (int)lp;
        r->top_logprobs = lp > 0 ? (int)lp : 0;
    }
out:
    json_decref(o);
    if (st != OJ_OK) {
        if (st == OJ_ERR_CAPACITY) bad(err, errlen, "out of memory reading the request");
        oj_serve_request_free(r);
        r->chat = chat;
    }
    return st;
}

/* Qwen2.5's template opens with this system message when the first
 * message is not a system one. */
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

oj_status oj_chat_template_detect(const char *json_text, size_t len, oj_chat_template *out,
                                  char *err, size_t errlen) {
    if (out == NULL) return OJ_ERR_INVALID_ARGUMENT;
    *out = OJ_CHAT_NONE;
    if (json_text == NULL)
        return bad(err, errlen, "the model has no tokenizer_config.json, so no chat template");
    json_error_t je;
    json_t *o = json_loadb(json_text, len, 0, &je);
    if (o == NULL) {
        bad(err, errlen, "tokenizer_config.json is not valid JSON: %s (line %d)", je.text, je.line);
        return OJ_ERR_CORRUPT;
    }
    json_t *t = json_object_get(o, "chat_template");
    oj_status st = OJ_OK;
    if (json_is_array(t)) { /* [{"name": "default", "template": ...}, ...] */
        json_t *def = NULL;
        for (size_t i = 0; i < json_array_size(t); i++) {
            json_t *e = json_array_get(t, i), *nm = json_object_get(e, "name");
            if (json_is_string(nm) && strcmp(json_string_value(nm), "default") == 0)
                def = json_object_get(e, "template");
        }
        t = def;
    }
    if (!json_is_string(t)) {
        st = bad(err, errlen, "tokenizer_config.json has no chat_template string");
    } else {
        const char *s = json_string_value(t);
        if (strstr(s, "<|im_start|>") && strstr(s, "<|im_end|>"))
            *out = strstr(s, QWEN25_SYSTEM) ? OJ_CHAT_QWEN25 : OJ_CHAT_CHATML;
        else if (strstr(s, "<|start_header_id|>") && strstr(s, "<|eot_id|>"))
            *out = !strstr(s, "Cutting Knowledge Date") ? OJ_CHAT_LLAMA3
                   : strstr(s, "strftime_now")          ? OJ_CHAT_LLAMA32
                                                        : OJ_CHAT_LLAMA31;
        else {
            char q[65];
            size_t k = 0;
            for (const char *p = s; *p && k < 64; p++) q[k++] = (*p < 0x20 || *p == 0x7f) ? ' ' : *p;
            q[k] = '\0';
            st = bad(err, errlen,
                     "the model's chat_template is not one ojas renders (ChatML or Llama 3 "
                     "headers): it begins '%s'",
                     q);
        }
    }
    json_decref(o);
    return st;
}

const char *oj_chat_template_name(oj_chat_template t) {
    switch (t) {
    case OJ_CHAT_CHATML: return "chatml";
    case OJ_CHAT_LLAMA3: return "llama3";
    case OJ_CHAT_QWEN25: return "chatml (qwen2.5 default system)";
    case OJ_CHAT_LLAMA31: return "llama3.1 (dated system header)";
    case OJ_CHAT_LLAMA32: return "llama3.2 (dated system header, today)";
    default: return "none";
    }
}

/* Append s to a growing buffer. */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s) {
    size_t k = strlen(s);
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t c = (b->cap ? b->cap * 2 : 256);
        while (c < b->n + k + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

/* s without leading and trailing whitespace (Jinja's trim), malloc'd. */
static char *trimmed(const char *s) {
    size_t k = strlen(s);
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++, k--;
    while (k > 0 && (s[k - 1] == ' ' || s[k - 1] == '\n' || s[k - 1] == '\t' || s[k - 1] == '\r'))
        k--;
    return dup_n(s, k);
}

static void put_header(sbuf *b, bool llama, const char *role, const char *content) {
    if (!llama) {
        put(b, "<|im_start|>");
        put(b, role);
        put(b, "\n");
        put(b, content);
        put(b, "<|im_end|>\n");
        return;
    }
    put(b, "<|start_header_id|>");
    put(b, role);
    put(b, "<|end_header_id|>\n\n");
    char *tr = trimmed(content); /* the template's `message['content'] | trim` */
    if (tr == NULL) b->oom = true;
    else put(b, tr);
    free(tr);
    put(b, "<|eot_id|>");
}

char *oj_chat_render(oj_chat_template t, const oj_serve_request *r) {
    if (r == NULL || t <= OJ_CHAT_NONE || t > OJ_CHAT_LLAMA32) return NULL;
    const bool llama = t == OJ_CHAT_LLAMA3 || t == OJ_CHAT_LLAMA31 || t == OJ_CHAT_LLAMA32;
    sbuf b = {0};
    int64_t first = 0;
    if (llama) put(&b, "<|begin_of_text|>");
    if (t == OJ_CHAT_QWEN25 && (r->n_messages == 0 || strcmp(r->roles[0], "system") != 0))
        put_header(&b, false, "system", QWEN25_SYSTEM);
    if (t == OJ_CHAT_LLAMA31 || t == OJ_CHAT_LLAMA32) {
        /* the system header is always there, dated, with the first system
         * message's text (trimmed) after the date */
        char date[32] = "26 Jul 2024"; /* the 3.1 template's date_string */
        if (t == OJ_CHAT_LLAMA32) {    /* strftime_now("%d %b %Y"), as transformers renders it */
            time_t now = time(NULL);
            struct tm tm;
            gmtime_r(&now, &tm);
            strftime(date, sizeof date, "%d %b %Y", &tm);
        }
        bool sys = r->n_messages > 0 && (strcmp(r->roles[0], "system") == 0 ||
                                         strcmp(r->roles[0], "developer") == 0);
        char *tr = sys ? trimmed(r->contents[0]) : dup_n("", 0);
        put(&b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                "2023\nToday Date: ");
        put(&b, date);
        put(&b, "\n\n");
        if (tr == NULL) b.oom = true;
        else put(&b, tr);
        free(tr);
        put(&b, "<|eot_id|>");
        first = sys ? 1 : 0;
    }
    for (int64_t i = first; i < r->n_messages; i++) {
        const char *role = strcmp(r->roles[i], "developer") == 0 ? "system" : r->roles[i];
        put_header(&b, llama, role, r->contents[i]);
    }
    put(&b, llama ? "<|start_header_id|>assistant<|end_header_id|>\n\n" : "<|im_start|>assistant\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
