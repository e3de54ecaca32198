# The Go module (go/): `go test -race ./...` as the ctest entry go_test
# (go_bench_smoke: its benchmarks, a few iterations; go_example: examples/go;
# go_train_bench: bench/go against the CLI),
# against this tree's libojas.so through pkg-config (a build-tree ojas.pc in
# <build>/go) with the Go caches inside the build directory and no network
# (standard library only). Not under the sanitizers (a Go test binary cannot
# load an ASan libojas). Skipped when there is no Go toolchain.
find_program(OJAS_GO go)
if(OJAS_TESTS AND OJAS_GO AND NOT OJAS_SANITIZE AND TARGET ojas_cli)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/ojas-build.pc.in ${CMAKE_BINARY_DIR}/go/ojas.pc @ONLY)
  set(OJAS_GO_ENV PKG_CONFIG_PATH=${CMAKE_BINARY_DIR}/go GOCACHE=${CMAKE_BINARY_DIR}/go/cache
      GOPATH=${CMAKE_BINARY_DIR}/go/path GOENV=off GOFLAGS=-mod=mod GOPROXY=off GO111MODULE=on CGO_ENABLED=1
      OJAS_BIN=$<TARGET_FILE:ojas_cli>)
  # Go's build cache does not see the C headers cgo reads: scripts/go_cgo.sh
  # puts their hash into CGO_CFLAGS, which the cache keys on.
  set(OJAS_GO_RUN bash ${CMAKE_SOURCE_DIR}/scripts/go_cgo.sh)
  add_test(NAME go_test
    COMMAND ${CMAKE_COMMAND} -E env ${OJAS_GO_ENV} ${OJAS_GO_RUN} ${OJAS_GO} test -race -count=1 ./...
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/go)
  # the cgo benchmarks, a few iterations each, so they keep working
  add_test(NAME go_bench_smoke
    COMMAND ${CMAKE_COMMAND} -E env ${OJAS_GO_ENV} ${OJAS_GO_RUN} ${OJAS_GO} test -count=1 -run ^$ -bench .
            -benchtime 20x .
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/go)
  # examples/go end to end: train, checkpoint, resume, sample
  add_test(NAME go_example
    COMMAND ${CMAKE_COMMAND} -E env ${OJAS_GO_ENV} ${OJAS_GO_RUN} bash ${CMAKE_SOURCE_DIR}/examples/go/run.sh
            $<TARGET_FILE:ojas_cli>)
  # bench/go: the Go-driven training run against `ojas train` (same bits)
  add_test(NAME go_train_bench
    COMMAND ${CMAKE_COMMAND} -E env ${OJAS_GO_ENV} ${OJAS_GO_RUN} bash ${CMAKE_SOURCE_DIR}/bench/go/run.sh
            $<TARGET_FILE:ojas_cli>)
  set_tests_properties(go_test go_bench_smoke go_example go_train_bench PROPERTIES TIMEOUT 900)
endif()
