package ojas

// #include <stdlib.h>
// #include "glue.h"
import "C"

import "unsafe"

// encodeLoopC runs n encodes of text in one C loop (bench_test.go: the C
// side of the cgo overhead measurement).
func encodeLoopC(t *Tokenizer, text string, n int) error {
	if err := t.h.lock(); err != nil {
		return err
	}
	defer t.h.unlock()
	p := C.CString(text)
	defer C.free(unsafe.Pointer(p))
	return newError(C.ojas_go_encode_loop(t.tok, p, C.size_t(len(text)), C.int64_t(n)), "encode loop failed")
}

// decodeStepLoopC runs n decoder steps in one C loop.
func decodeStepLoopC(d *Decoder, n int) error {
	if err := d.m.h.lock(); err != nil {
		return err
	}
	defer d.m.h.unlock()
	if d.dec == nil {
		return ErrClosed
	}
	return newError(C.ojas_go_decode_step_loop(d.dec, C.int64_t(n)), "decode step loop failed")
}
