#!/usr/bin/env bash
# Run a command (go test, go build, examples/go/run.sh) with CGO_CFLAGS
# holding a hash of include/ojas/*.h: Go's build cache keys on CGO_CFLAGS
# but not on the C headers cgo reads, so without it a changed struct would
# be compiled into the Go package with its old layout.
set -euo pipefail
h=$(cat "$(dirname "$0")"/../include/ojas/*.h | sha1sum | cut -c1-16)
export CGO_CFLAGS="${CGO_CFLAGS:+$CGO_CFLAGS }-DOJAS_HEADERS=$h"
exec "$@"
