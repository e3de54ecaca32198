/* Printable renditions of untrusted strings for error messages (UTF-8
 * validation is core/utf8.h's). */
#include <stdio.h>
#include <string.h>

#include "io/io_internal.h"

const char *oj__quote(char *buf, size_t size, const char *s, size_t len) {
    if (size < 8) {
        if (size) buf[0] = '\0';
        return buf;
    }
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        char tmp[8];
        size_t tl;
        if (c == '"' || c == '\\') {
            tmp[0] = '\\', tmp[1] = (char)c, tl = 2;
        } else if (c < 0x20 || c == 0x7f) {
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
        } else if (c >= 0x80) {
            /* keep whole valid UTF-8 sequences, escape stray bytes */
            size_t n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
            if (n && i + n <= len && oj__utf8_valid((const uint8_t *)s + i, n, NULL)) {
                if (o + n + 5 > size) goto cut;
                memcpy(buf + o, s + i, n);
                o += n;
                i += n - 1;
                continue;
            }
            tl = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
        } else {
            tmp[0] = (char)c, tl = 1;
        }
        if (o + tl + 5 > size) goto cut;
        memcpy(buf + o, tmp, tl);
        o += tl;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
cut:
    memcpy(buf + o, "...\"", 5);
    return buf;
}

void oj__error_prefix(oj_error *err, const char *prefix) {
    if (!err || !err->status) return;
    size_t cap = sizeof err->message - 1, pl = strlen(prefix), ml = strnlen(err->message, cap);
    if (pl > cap) pl = cap;
    if (pl + ml > cap) ml = cap - pl;
    memmove(err->message + pl, err->message, ml);
    memcpy(err->message, prefix, pl);
    err->message[pl + ml] = '\0';
}
