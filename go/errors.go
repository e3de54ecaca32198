package ojas

// #include <ojas/ojas.h>
import "C"

import "errors"

// The kinds of error, one per C status (oj_status), for errors.Is. An *Error
// of kind ErrCapacity matches errors.Is(err, ErrCapacity).
var (
	ErrInvalid     = errors.New("ojas: invalid argument")      // OJ_ERR_INVALID_ARGUMENT
	ErrShape       = errors.New("ojas: shape mismatch")        // OJ_ERR_SHAPE
	ErrDtype       = errors.New("ojas: dtype mismatch")        // OJ_ERR_DTYPE
	ErrDevice      = errors.New("ojas: device error")          // OJ_ERR_DEVICE: cannot open, device fault
	ErrCapacity    = errors.New("ojas: over capacity")         // OJ_ERR_CAPACITY: budget, ceiling or memory
	ErrOutOfRange  = errors.New("ojas: out of range")          // OJ_ERR_OUT_OF_RANGE
	ErrIO          = errors.New("ojas: I/O error")             // OJ_ERR_IO
	ErrCorrupt     = errors.New("ojas: corrupt data")          // OJ_ERR_CORRUPT: malformed file, bad hash
	ErrUnsupported = errors.New("ojas: unsupported")           // OJ_ERR_UNSUPPORTED
	ErrNumeric     = errors.New("ojas: non-finite value")      // OJ_ERR_NUMERIC
	ErrInternal    = errors.New("ojas: internal error")        // OJ_ERR_INTERNAL (a bug in ojas)
	ErrState       = errors.New("ojas: invalid state")         // OJ_ERR_STATE
	ErrClosed      = errors.New("ojas: handle already closed") // a call on a closed handle (Go side)
)

var kinds = map[C.oj_status]error{
	C.OJ_ERR_INVALID_ARGUMENT: ErrInvalid,
	C.OJ_ERR_SHAPE:            ErrShape,
	C.OJ_ERR_DTYPE:            ErrDtype,
	C.OJ_ERR_DEVICE:           ErrDevice,
	C.OJ_ERR_CAPACITY:         ErrCapacity,
	C.OJ_ERR_OUT_OF_RANGE:     ErrOutOfRange,
	C.OJ_ERR_IO:               ErrIO,
	C.OJ_ERR_CORRUPT:          ErrCorrupt,
	C.OJ_ERR_UNSUPPORTED:      ErrUnsupported,
	C.OJ_ERR_NUMERIC:          ErrNumeric,
	C.OJ_ERR_INTERNAL:         ErrInternal,
	C.OJ_ERR_STATE:            ErrState,
}

// Error is a failure reported by the C library: its status (Status, e.g.
// "OJ_ERR_CAPACITY"), the kind errors.Is matches, and the engine's
// one-line message naming what was wrong.
type Error struct {
	Kind    error  // one of the Err* sentinels
	Status  string // oj_status_name of the C status
	Message string // the library's message
}

func (e *Error) Error() string { return "ojas: " + e.Message }

// Is reports whether target is e's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// newError makes the *Error of status st with message msg (nil for OJ_OK).
func newError(st C.oj_status, msg string) error {
	if st == C.OJ_OK {
		return nil
	}
	kind, ok := kinds[st]
	if !ok {
		kind = ErrInternal
	}
	if msg == "" {
		msg = C.GoString(C.oj_status_name(st))
	}
	return &Error{Kind: kind, Status: C.GoString(C.oj_status_name(st)), Message: msg}
}

// fromC converts a status and an oj_error filled by the same call.
func fromC(st C.oj_status, e *C.oj_error) error {
	if st == C.OJ_OK {
		return nil
	}
	msg := ""
	if e != nil {
		msg = C.GoString(&e.message[0])
	}
	return newError(st, msg)
}

// fromEngine converts the error recorded on an engine and clears it, so
// that the engine serves the next call. nil when none is recorded.
func fromEngine(eng *C.oj_engine) error {
	st := C.oj_last_status(eng)
	if st == C.OJ_OK {
		return nil
	}
	err := newError(st, C.GoString(C.oj_last_error(eng)))
	C.oj_clear_error(eng)
	return err
}
