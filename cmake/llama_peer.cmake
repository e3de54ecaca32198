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
  foreach(kind PARTIAL OLD SHIFTED CTX)
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
if(OJAS_TESTS)
  # Numeric arguments are checked whole and by name before the library is
  # loaded (the stand-in would abort if called).
  set(lib --lib $<TARGET_FILE:llama_peer_fake_partial> none.gguf)
  foreach(case "new_suffix|1,2;8x;1|NEW is '8x', not an integer"
                "new_huge|1,2;2147483647;1|NEW must be in \\[3, 1048576\\] \\(it is 2147483647\\)"
                "threads_negative|1,2;8;-1|THREADS must be >= 1 \\(it is -1\\)"
                "gpu_layers_word|1,2;8;1;--gpu-layers;abc|--gpu-layers is 'abc', not an integer"
                "repeats_hex|1,2;8;1;--repeats;0x10|--repeats is '0x10', not an integer"
                "prompt_trailing_comma|1,2,;8;1|PROMPT_IDS ends with a comma")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts -1 want)
    list(REMOVE_AT parts 0 -1)
    add_test(NAME llama_peer_checks_${name} COMMAND llama_peer ${lib} ${parts})
    set_tests_properties(llama_peer_checks_${name} PROPERTIES PASS_REGULAR_EXPRESSION "${want}")
  endforeach()
endif()
if(OJAS_TESTS)
  # prompt + NEW beyond the model's training context (the stand-in's 256) is
  # refused before a context is made; 2 + 254 is the largest accepted, which
  # the stand-in's llama_init_from_model then aborts on.
  add_test(NAME llama_peer_refuses_past_train_context
           COMMAND llama_peer --lib $<TARGET_FILE:llama_peer_fake_ctx> none.gguf 1,2 255 1)
  set_tests_properties(llama_peer_refuses_past_train_context PROPERTIES
    PASS_REGULAR_EXPRESSION "2 prompt ids \\+ NEW 255 = 257 tokens exceed none.gguf's training context of 256")
endif()
if(OJAS_TESTS)
  # scripts/fatbin_archs.py (the CUDA code a library carries, where no
  # cuobjdump is installed; pack_llama_cuda.sh --cuda-lib checks with it):
  # a library without CUDA code lacks sm_90; the CUDA module has it.
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME fatbin_archs_no_cuda_code
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/fatbin_archs.py
                     $<TARGET_FILE:llama_peer_fake_partial> --need sm_90)
    set_tests_properties(fatbin_archs_no_cuda_code PROPERTIES
      PASS_REGULAR_EXPRESSION "has no sm_90 machine code")
    if(TARGET ojas_cuda)
      add_test(NAME fatbin_archs_cuda_module
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/fatbin_archs.py
                       $<TARGET_FILE:ojas_cuda> --need sm_90)
      set_tests_properties(fatbin_archs_cuda_module PROPERTIES
        PASS_REGULAR_EXPRESSION "sm_90: [0-9]+ ELF \\(SASS\\)")
    endif()
  endif()
endif()
