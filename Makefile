# Thin wrapper over CMake. `make demo` and `make test` are the README's two commands.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
PREFIX     ?=
MAKEFLAGS  += --no-print-directory

.PHONY: all build deps test test-unit test-install test-asan test-reference demo install clean fuzz bench python

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

deps:
	bash scripts/deps.sh

# Every suite: unit tests (optimised build, CUDA compiled when nvcc exists),
# the same tests under ASan+UBSan+LeakSanitizer, then the PyTorch reference tests.
test: deps
	$(MAKE) build
	$(MAKE) test-unit
	$(MAKE) test-install
	$(MAKE) test-asan
	$(MAKE) test-reference

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-install: build
	bash tests/install/check.sh $(BUILD)

test-asan:
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DOJAS_SANITIZE=ON -DOJAS_CUDA=OFF -DOJAS_BENCH=OFF
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

test-reference: build
	@if ls tests/reference/test_*.py >/dev/null 2>&1; then \
		OJAS_LIB=$(CURDIR)/$(BUILD)/libojas.so /usr/bin/python3 -m pytest -q tests/reference; \
	else echo "no reference tests yet"; fi

# The Python package built against $(BUILD) into $(BUILD)/python (docs/python.md).
python: build
	cmake --build $(BUILD) --target python

demo: deps
	$(MAKE) build
	bash scripts/demo.sh

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX))

fuzz:
	bash scripts/fuzz.sh

bench: build
	bash bench/cpu/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
