/* A stand-in for libojas-cuda.so that runs without CUDA, for
 * test_backend_module: its entry accepts libojas's table (or refuses it
 * when OJAS_FAKE_MODULE_REFUSE is set) and returns a backend whose open
 * always fails, its message written through the table's error_setv, so the
 * test sees libojas -> module -> libojas work end to end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/module.h"

static const oj_cuda_host *g_host;

static oj_status set_err(oj_error *e, oj_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oj_status r = g_host->error_setv(e, st, fmt, ap);
    va_end(ap);
    return r;
}

static oj_status fake_open(oj_engine *eng, int index, oj_error *err) {
    (void)eng;
    return set_err(err, OJ_ERR_DEVICE, "fake CUDA module: cuda:%d opened through the table", index);
}

static const oj_backend fake_backend = {.name = "fake-cuda", .type = OJ_DEVICE_CUDA,
                                        .open = fake_open};

__attribute__((visibility("default"))) const oj_backend *
oj_cuda_module_init(const oj_cuda_host *host, char *msg, size_t len);

const oj_backend *oj_cuda_module_init(const oj_cuda_host *host, char *msg, size_t len) {
    if (getenv("OJAS_FAKE_MODULE_REFUSE") != NULL) {
        snprintf(msg, len, "fake module refuses (OJAS_FAKE_MODULE_REFUSE)");
        return NULL;
    }
    if (host->abi != OJ_CUDA_MODULE_ABI || host->size != sizeof *host ||
        host->engine_size != sizeof(struct oj_engine) || host->backend_size != sizeof(oj_backend)) {
        snprintf(msg, len, "fake module: the table does not match");
        return NULL;
    }
    g_host = host;
    return &fake_backend;
}
