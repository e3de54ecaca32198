# ojas serve (apps/ojas/cmd_serve.c): the HTTP server links libmicrohttpd
# (Debian libmicrohttpd-dev); the scheduler and the request parser are in
# libojas (src/serve). serve_http starts `ojas serve` on a loopback port
# and drives it with curl and a standard-library Python client.
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
if(TARGET ojas_cli)
  target_link_libraries(ojas_cli PRIVATE PkgConfig::MHD)
  if(OJAS_TESTS)
    find_program(OJAS_SERVE_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
    if(OJAS_SERVE_PYTHON)
      add_test(NAME serve_http
        COMMAND ${OJAS_SERVE_PYTHON} ${CMAKE_SOURCE_DIR}/tests/serve/test_serve_http.py
                --ojas $<TARGET_FILE:ojas_cli>)
      set_tests_properties(serve_http PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
    endif()
  endif()
endif()
