/* The FLOP/s that MFU divides by on a CUDA engine when the config gives
 * none: the f32 GEMM throughput of the engine's own oj_matmul (its device
 * and numerics), best of a few square 4096 multiplications. (The CPU is
 * not measured: trainer.c.) */
#include "ojas/ops.h"
#include "train/train_internal.h"

double oj__train_measure_peak(oj_engine *eng) {
    const int64_t n = 4096;
    const int64_t shape[2] = {n, n};
    bool grad = oj_set_grad_enabled(eng, false);
    double best = 0;
    if (oj_scope_begin(eng) == OJ_OK) {
        oj_tensor *a = oj_full(eng, 2, shape, OJ_F32, 0.5); /* no RNG: */
        oj_tensor *b = oj_full(eng, 2, shape, OJ_F32, 0.25); /* its offset is state */
        for (int rep = 0; rep < 4 && a && b; rep++) {
            double t0 = oj__now_s();
            oj_tensor *c = oj_matmul(a, b);
            if (!c)
                break;
            (void)oj_item_at(c, 0); /* waits for the device */
            double dt = oj__now_s() - t0;
            oj_release(c);
            if (rep > 0 && dt > 0 && 2.0 * (double)n * (double)n * (double)n / dt > best)
                best = 2.0 * (double)n * (double)n * (double)n / dt;
        }
        oj_scope_end(eng);
    }
    oj_set_grad_enabled(eng, grad);
    if (oj_last_status(eng) != OJ_OK)
        oj_clear_error(eng);
    return best;
}
