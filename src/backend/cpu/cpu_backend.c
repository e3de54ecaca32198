/* The CPU backend table: the reference implementation every other backend
 * is tested against. */
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_memory.h"

const oj_backend oj_cpu_backend = {
    .name = "cpu",
    .type = OJ_DEVICE_CPU,
    .open = NULL,
    .close = NULL,
    .alloc = oj_cpu_mem_alloc,
    .free = oj_cpu_mem_free,
    .copy_h2d = oj_cpu_mem_copy,
    .copy_d2h = oj_cpu_mem_copy,
    .copy_d2d = oj_cpu_mem_copy,
    .memset0 = oj_cpu_mem_set0,
    .synchronize = oj_cpu_mem_synchronize,
    .copy = oj_cpu_copy,
    .fill = oj_cpu_fill,
    .unary = oj_cpu_unary,
    .unary_backward = oj_cpu_unary_backward,
    .binary = oj_cpu_binary,
    .where = oj_cpu_where,
    .rand = oj_cpu_rand,
    .reduce = oj_cpu_reduce,
    .matmul = oj_cpu_matmul,
    .adam_step = oj_cpu_adam_step,
    .sgd_step = oj_cpu_sgd_step,
    .muon_momentum = oj_cpu_muon_momentum,
    .apply_update = oj_cpu_apply_update,
};
