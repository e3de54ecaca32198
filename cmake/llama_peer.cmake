# bench/quant/llama_peer: llama.cpp's batch-1 decode through node-llama-cpp
# 3.21.1's prebuilt libllama, dlopen'ed (no link to llama.cpp or ojas; run by
# bench/quant/run_cuda_peer.sh, which also builds it with gcc alone). Built
# here so CI compiles it; its refusals of a library whose ABI it does not
# follow are tested against stand-ins (tests/unit/llama_peer_fake.c).
if(OJAS_BENCH OR OJAS_TESTS)
  add_executable(llama_peer ${CMAKE_SOURCE_DIR}/bench/quant/llama_peer.c)
  target_compile_options(llama_peer PRIVATE ${OJAS_WARNINGS})
  target_link_libraries(llama_peer PRIVATE ${CMAKE_DL_LIBS})
endif()
if(OJAS_TESTS)
  foreach(kind PARTIAL OLD SHIFTED)
    string(TOLOWER ${kind} k)
    add_library(llama_peer_fake_${k} SHARED ${CMAKE_SOURCE_DIR}/tests/unit/llama_peer_fake.c)
    target_compile_definitions(llama_peer_fake_${k} PRIVATE FAKE_${kind})
    target_compile_options(llama_peer_fake_${k} PRIVATE ${OJAS_WARNINGS})
    set_target_properties(llama_peer_fake_${k} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fake)
  endforeach()
  set(args none.gguf 1,2 8 1)
  add_test(NAME llama_peer_refuses_missing_symbol
           COMMAND llama_peer --lib $<TARGET_FILE:llama_peer_fake_partial> ${args})
  set_tests_properties(llama_peer_refuses_missing_symbol PROPERTIES
    PASS_REGULAR_EXPRESSION "has no symbol llama_log_set: this program follows llama.h of node-llama-cpp 3.21.1")
  add_test(NAME llama_peer_refuses_other_release
           COMMAND llama_peer --lib $<TARGET_FILE:llama_peer_fake_old> ${args})
  set_tests_properties(llama_peer_refuses_other_release PROPERTIES
    PASS_REGULAR_EXPRESSION "is llama.cpp 0.3.0-dev \\(ggml 5b4ebc5\\), not 0.4.0-dev")
  add_test(NAME llama_peer_refuses_moved_layout
           COMMAND llama_peer --lib $<TARGET_FILE:llama_peer_fake_shifted> ${args})
  set_tests_properties(llama_peer_refuses_moved_layout PROPERTIES
    PASS_REGULAR_EXPRESSION "the default model n_gpu_layers/split_mode do not read back as llama.cpp 0.4.0-dev's")
endif()
