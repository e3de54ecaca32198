# Quantized inference (src/quant, GGUF): the decode benchmark's smoke mode
# (gpt2-tiny, f32 / q8_0 / q4_0 / q4_1, well under a second) runs as a test.
if(OJAS_TESTS AND TARGET bench_quant_decode)
  add_test(NAME bench_quant_decode_smoke COMMAND bench_quant_decode --smoke --threads 2)
endif()
# The perplexity benchmark's smoke mode (random gpt2 at C 256, random tokens).
if(OJAS_TESTS AND TARGET bench_quant_ppl)
  add_test(NAME bench_quant_ppl_smoke COMMAND bench_quant_ppl --smoke --threads 2)
endif()
# The kernel-level benchmark's smoke mode (two iterations a level).
if(OJAS_TESTS AND TARGET bench_quant_kernels)
  add_test(NAME bench_quant_kernels_smoke COMMAND bench_quant_kernels --smoke)
endif()
