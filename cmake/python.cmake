# The Python package (python/, docs/python.md): `cmake --build B --target python`
# builds the extension ojas._C against this build's libojas.so into B/python
# (with an rpath to B, so no LD_LIBRARY_PATH); the ctest entries python_build
# (fixture) and python_tests (pytest over python/tests, which compares with
# PyTorch) do the same under ctest, so `make test` runs them. Needs Debian's
# /usr/bin/python3 with setuptools, numpy, pytest and torch, and libdlpack-dev
# (scripts/deps.sh); skipped with a message when they are missing.
set(OJAS_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with numpy, torch and pytest for python/")
include(CheckIncludeFile)
check_include_file(dlpack/dlpack.h OJAS_HAVE_DLPACK_H)
set(OJAS_PY_OUT ${CMAKE_BINARY_DIR}/python)
set(OJAS_PY_BUILD
  ${CMAKE_COMMAND} -E env OJAS_BUILD_DIR=${CMAKE_BINARY_DIR}
  ${OJAS_PYTHON} setup.py -q build_py --build-lib ${OJAS_PY_OUT}
  build_ext --build-lib ${OJAS_PY_OUT} --build-temp ${CMAKE_BINARY_DIR}/python-tmp)

if(NOT EXISTS ${OJAS_PYTHON} OR NOT OJAS_HAVE_DLPACK_H)
  message(STATUS "ojas: Python package not built (needs ${OJAS_PYTHON} and libdlpack-dev)")
  return()
endif()

add_custom_target(python COMMAND ${OJAS_PY_BUILD}
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/python DEPENDS ojas_shared
  COMMENT "Building the Python package into ${OJAS_PY_OUT}" VERBATIM)

if(OJAS_TESTS)
  add_test(NAME python_build COMMAND ${OJAS_PY_BUILD} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/python)
  set_tests_properties(python_build PROPERTIES FIXTURES_SETUP ojas_python)
  add_test(NAME python_tests
    COMMAND ${OJAS_PYTHON} -m pytest -q -p no:cacheprovider ${CMAKE_SOURCE_DIR}/python/tests
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set(OJAS_PY_ENV PYTHONPATH=${OJAS_PY_OUT} PYTHONDONTWRITEBYTECODE=1)
  if(OJAS_SANITIZE)
    # libojas.so is instrumented and the interpreter is not: the ASan runtime
    # must come first. Python's own allocations are not leak-checked; the
    # tests check ojas's (live tensors, memory_allocated) themselves.
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE OJAS_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
    list(APPEND OJAS_PY_ENV LD_PRELOAD=${OJAS_LIBASAN}
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 OJAS_PY_SANITIZE=1)
  endif()
  set_tests_properties(python_tests PROPERTIES FIXTURES_REQUIRED ojas_python
    ENVIRONMENT "${OJAS_PY_ENV}" TIMEOUT 300)
endif()
