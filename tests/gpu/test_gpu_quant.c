// test: the CUDA backend has no quantized kernels, and says so: quantizing
// a tensor, making a quantized matrix from blocks, a model's oj_gpt_quantize
// and loading a quantized GGUF tensor on a CUDA engine each fail with
// OJ_ERR_UNSUPPORTED naming the type, nothing dequantized on the host
// (exit 77 without a device)
#include "gpu_testutil.h"

#include <string.h>

#include "ojas/gpt.h"
#include "ojas/quant.h"

static void expect_unsupported(oj_engine *eng, const char *needle) {
    assert_int_equal(oj_last_status(eng), OJ_ERR_UNSUPPORTED);
    if (strstr(oj_last_error(eng), needle) == NULL)
        fail_msg("error \"%s\" does not name \"%s\"", oj_last_error(eng), needle);
    oj_clear_error(eng);
}

static void test_cuda_refuses_quantized(void **state) {
    (void)state;
    oj_engine *eng = gpu_test_engine(true, false, OJ_NUMERICS_FAST, 0);
    oj_scope_begin(eng);
    oj_tensor *w = oj_ones(eng, 2, (int64_t[]){4, 64}, OJ_F32);
    assert_non_null(w);
    assert_null(oj_quantize(w, OJ_Q8_0));
    expect_unsupported(eng, "quantize: q8_0 weights are CPU-only");
    uint8_t blocks[4 * 2 * 18] = {0};
    assert_null(oj_qtensor_from_blocks(eng, OJ_Q4_0, 4, 64, blocks, sizeof blocks));
    expect_unsupported(eng, "q4_0 weights are CPU-only");
    oj_scope_end(eng);
    oj_gpt_config c;
    assert_true(oj_gpt_preset("gpt2-tiny", &c));
    oj_gpt *m = NULL;
    assert_int_equal(oj_gpt_create(eng, &c, 1, &m), OJ_OK);
    assert_int_equal(oj_gpt_quantize(m, OJ_Q4_1), OJ_ERR_UNSUPPORTED);
    expect_unsupported(eng, "q4_1 weights are CPU-only");
    assert_int_equal(oj_gpt_quantized_type(m), OJ_QTYPE_COUNT);
    oj_gpt_free(m);
    assert_int_equal(oj_engine_live_tensors(eng), 0);
    oj_engine_free(eng);
}

int main(void) {
    if (gpu_test_probe(false, NULL) != 0) return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_refuses_quantized)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
