/* Which backend serves a device type in this build. */
#include "backend/backend.h"

const struct oj_backend *oj__backend_for(oj_device_type type) {
    switch (type) {
    case OJ_DEVICE_CPU: return &oj_cpu_backend;
    case OJ_DEVICE_CUDA:
#ifdef OJAS_HAVE_CUDA
        return &oj_cuda_backend;
#else
        return NULL; /* engine creation reports "CUDA backend not built" */
#endif
    }
    return NULL;
}
