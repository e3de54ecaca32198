package ojas

// #include <stdlib.h>
// #include <ojas/ojas.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// Numerics is the engine's numerics mode.
type Numerics int

const (
	// Fast allows any summation order and library GEMMs.
	Fast Numerics = C.OJ_NUMERICS_FAST
	// Exact fixes every summation order: results are bit-identical across
	// runs and thread counts.
	Exact Numerics = C.OJ_NUMERICS_EXACT
)

// LoadOptions configure the engine a model runs on.
type LoadOptions struct {
	// Device is "cpu" (the default when empty), "cuda" or "cuda:N". A
	// device that cannot be opened is ErrDevice, never a fallback.
	Device string
	// Threads is the CPU thread count; 0: the usable CPUs (cgroup quota
	// respected).
	Threads int
	// Numerics is Fast (default) or Exact.
	Numerics Numerics
	// BudgetBytes is the engine's memory budget; 0: what the machine can
	// give less a margin (and at most the process memory ceiling).
	BudgetBytes int64
	// Seed is the engine's RNG seed (model initialisation for NewModel).
	Seed uint64
}

// engineConfig converts o into the C engine config.
func (o LoadOptions) engineConfig() (C.oj_engine_config, error) {
	cfg := C.oj_engine_config_default()
	dev := o.Device
	if dev == "" {
		dev = "cpu"
	}
	cs := C.CString(dev)
	defer C.free(unsafe.Pointer(cs))
	if !C.oj_device_parse(cs, &cfg.device) {
		return cfg, &Error{Kind: ErrInvalid, Status: "OJ_ERR_INVALID_ARGUMENT",
			Message: fmt.Sprintf("device %q is not cpu, cuda or cuda:N", dev)}
	}
	if o.Threads < 0 || o.BudgetBytes < 0 {
		return cfg, &Error{Kind: ErrInvalid, Status: "OJ_ERR_INVALID_ARGUMENT",
			Message: fmt.Sprintf("threads %d and budget %d bytes must be >= 0", o.Threads, o.BudgetBytes)}
	}
	cfg.numerics = C.oj_numerics(o.Numerics)
	cfg.threads = C.int(o.Threads)
	cfg.budget_bytes = C.int64_t(o.BudgetBytes)
	cfg.seed = C.uint64_t(o.Seed)
	return cfg, nil
}

// openEngine opens a C engine for o.
func openEngine(o LoadOptions) (*C.oj_engine, error) {
	cfg, err := o.engineConfig()
	if err != nil {
		return nil, err
	}
	var eng *C.oj_engine
	var e C.oj_error
	if st := C.oj_engine_create(&cfg, &eng, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	return eng, nil
}
