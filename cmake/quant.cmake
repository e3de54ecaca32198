# Quantized inference (src/quant, GGUF): the decode benchmark's smoke mode
# (gpt2-tiny, f32 / q8_0 / q4_0 / q4_1, well under a second) runs as a test.
if(OJAS_TESTS AND TARGET bench_quant_decode)
  add_test(NAME bench_quant_decode_smoke COMMAND bench_quant_decode --smoke --threads 2)
endif()
