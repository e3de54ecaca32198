/* In-memory form of oj_generation_config_load (infer.h), for the fuzz
 * target. Internal to ojas. */
#ifndef OJAS_INFER_GENERATION_CONFIG_H
#define OJAS_INFER_GENERATION_CONFIG_H

#include <stddef.h>

#include "ojas/infer.h"

/* Parse generation_config.json text[0..len) (not NUL-terminated); `path`
 * names it in errors. Same contract as oj_generation_config_load; *out is
 * written only on success. */
oj_status oj__generation_config_from_json(const char *text, size_t len, const char *path,
                                          int64_t vocab_size, oj_generation_config *out,
                                          oj_error *err);

#endif
