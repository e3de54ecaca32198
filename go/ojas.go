// Package ojas is the Go API of ojas, in process over its C library
// (libojas, found through pkg-config): load GPT models from Hugging Face
// directories and ojas checkpoints, train them step by step, save and
// resume checkpoints, tokenize, and sample, with the library's guarantees:
// bit-identical training under Exact numerics, no silent device fallback
// (a device that cannot open is ErrDevice), and memory budgets that refuse
// (ErrCapacity) instead of crashing.
//
// Every handle (Model, Trainer, Tokenizer) serialises the calls made on it
// with a mutex, so it may be shared by goroutines; different handles run in
// parallel. Close releases a handle's C memory at once; a finalizer frees a
// handle that was never closed, as a backstop only. A failure in the C
// library is returned as an *Error whose kind errors.Is can test
// (ErrCapacity, ErrDevice, ErrCorrupt, ...); the library never aborts the
// process.
//
// Build: `#cgo pkg-config: ojas`, so PKG_CONFIG_PATH must lead to ojas.pc
// (installed: <prefix>/lib/pkgconfig; in a build tree: <build>/go, which
// cmake writes for the tests). docs/go.md has the API and its costs.
package ojas

// #cgo pkg-config: ojas
// #include <ojas/ojas.h>
import "C"

// Version is the version of the C library this package was built against.
const Version = C.OJ_VERSION_STRING
