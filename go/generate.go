package ojas

// #include <stdlib.h>
// #include "glue.h"
import "C"

import (
	"context"
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// SampleOptions choose how Generate picks tokens (oj_sampler_config). The
// zero value is plain sampling at temperature 0 (greedy) for 64 tokens.
type SampleOptions struct {
	Temperature       float64 // 0: greedy (argmax, lowest id on ties)
	TopK              int64   // 0: off
	TopP              float64 // nucleus; 0 or 1: off
	RepetitionPenalty float64 // 0 or 1: off
	Seed              uint64  // sampling is a function of (seed, step)
	MaxNewTokens      int64   // 0: 64
	StopToken         *int32  // generation ends at this token (not emitted); nil: none
}

// generation is what the C callback reaches through its cgo.Handle.
type generation struct {
	ctx      context.Context
	onToken  func(token int32) bool
	canceled error
	panicked interface{}
}

//export ojasGoOnToken
func ojasGoOnToken(seq C.int64_t, token C.int32_t, ctx unsafe.Pointer) C._Bool {
	g := cgo.Handle(uintptr(ctx)).Value().(*generation)
	if err := g.ctx.Err(); err != nil {
		g.canceled = err
		return false
	}
	if g.onToken == nil {
		return true
	}
	keep := false
	func() {
		defer func() {
			if p := recover(); p != nil { // never unwind through C frames
				g.panicked = p
			}
		}()
		keep = g.onToken(int32(token))
	}()
	return C._Bool(keep && g.panicked == nil)
}

// Generate samples up to opts.MaxNewTokens tokens after prompt (token ids,
// at least one) with a KV cache, calling onToken (may be nil) with each
// token as it is made; onToken returning false stops. ctx is checked
// between tokens: when it is done, generation stops and ctx.Err() is
// returned with the tokens made so far. onToken runs while the model is
// locked: it must not call the model's methods. A gpt2 or llama model
// stops at its context; nanolab goes on over a sliding window. Errors:
// ErrInvalid (an empty prompt, an id outside the vocabulary), the model's.
func (m *Model) Generate(ctx context.Context, prompt []int32, opts SampleOptions,
	onToken func(token int32) bool) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, &Error{Kind: ErrInvalid, Status: "OJ_ERR_INVALID_ARGUMENT",
			Message: "generate: the prompt is empty"}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := C.oj_sampler_config_default()
	cfg.temperature = C.double(opts.Temperature)
	cfg.top_k = C.int64_t(opts.TopK)
	if opts.TopP > 0 {
		cfg.top_p = C.double(opts.TopP)
	}
	if opts.RepetitionPenalty > 0 {
		cfg.repetition_penalty = C.double(opts.RepetitionPenalty)
	}
	cfg.seed = C.uint64_t(opts.Seed)
	if opts.MaxNewTokens > 0 {
		cfg.max_new_tokens = C.int64_t(opts.MaxNewTokens)
	}
	cfg.stop_token = -1
	if opts.StopToken != nil {
		cfg.stop_token = C.int32_t(*opts.StopToken)
	}
	if err := m.h.lock(); err != nil {
		return nil, err
	}
	defer m.h.unlock()
	g := &generation{ctx: ctx, onToken: onToken}
	h := cgo.NewHandle(g)
	defer h.Delete()
	cprompt := (*C.int32_t)(unsafe.Pointer(&prompt[0])) // read during the call only
	var out *C.int32_t
	var n C.int64_t
	st := C.ojas_go_generate(m.gpt, cprompt, C.int64_t(len(prompt)), &cfg, C.uintptr_t(h), &out, &n)
	var toks []int32
	if out != nil {
		toks = append(toks, unsafe.Slice((*int32)(unsafe.Pointer(out)), int(n))...)
		C.free(unsafe.Pointer(out))
	}
	if g.panicked != nil {
		panic(g.panicked)
	}
	if st != C.OJ_OK {
		err := fromEngine(m.eng)
		if err == nil {
			err = newError(st, "generate failed")
		}
		return toks, err
	}
	if g.canceled != nil {
		return toks, g.canceled
	}
	return toks, nil
}

// Decoder decodes one sequence greedily, one token per call, with the
// step's work fixed (a CUDA graph replay on a CUDA engine;
// oj_gpt_decoder). It belongs to its model and shares its lock; Close it
// before the model, or the model's Close frees it.
type Decoder struct {
	m   *Model
	dec *C.oj_gpt_decoder
	s   *C.ojas_go_scratch // C memory for the next token
}

// NewDecoder makes a decoder with room for capacity positions (prompt and
// new tokens).
func (m *Model) NewDecoder(capacity int64) (*Decoder, error) {
	if err := m.h.lock(); err != nil {
		return nil, err
	}
	defer m.h.unlock()
	d := &Decoder{m: m, s: (*C.ojas_go_scratch)(C.calloc(1, C.sizeof_ojas_go_scratch))}
	if d.s == nil {
		return nil, &Error{Kind: ErrCapacity, Status: "OJ_ERR_CAPACITY", Message: "decoder: out of host memory"}
	}
	if st := C.oj_gpt_decoder_create(m.gpt, C.int64_t(capacity), true, &d.dec); st != C.OJ_OK {
		C.free(unsafe.Pointer(d.s))
		err := fromEngine(m.eng)
		if err == nil {
			err = newError(st, fmt.Sprintf("decoder of capacity %d", capacity))
		}
		return nil, err
	}
	m.decs[d] = struct{}{}
	return d, nil
}

// Prefill starts a sequence: runs prompt into the cache and returns the
// greedy next token.
func (d *Decoder) Prefill(prompt []int32) (int32, error) {
	if err := d.m.h.lock(); err != nil {
		return -1, err
	}
	defer d.m.h.unlock()
	if d.dec == nil {
		return -1, ErrClosed
	}
	if len(prompt) == 0 {
		return -1, &Error{Kind: ErrInvalid, Status: "OJ_ERR_INVALID_ARGUMENT", Message: "prefill: the prompt is empty"}
	}
	cp := (*C.int32_t)(unsafe.Pointer(&prompt[0]))
	if st := C.oj_gpt_decoder_prefill(d.dec, cp, C.int64_t(len(prompt)), &d.s.token); st != C.OJ_OK {
		return -1, d.err(st)
	}
	return int32(d.s.token), nil
}

// Step feeds the pending token and returns the greedy token after it.
func (d *Decoder) Step() (int32, error) {
	if err := d.m.h.lock(); err != nil {
		return -1, err
	}
	defer d.m.h.unlock()
	if d.dec == nil {
		return -1, ErrClosed
	}
	if st := C.oj_gpt_decoder_step(d.dec, &d.s.token); st != C.OJ_OK {
		return -1, d.err(st)
	}
	return int32(d.s.token), nil
}

func (d *Decoder) err(st C.oj_status) error {
	if err := fromEngine(d.m.eng); err != nil {
		return err
	}
	return newError(st, "decoder failed")
}

// Close frees the decoder (a no-op when closed, or once its model is).
func (d *Decoder) Close() error {
	d.m.h.mu.Lock()
	defer d.m.h.mu.Unlock()
	if d.dec != nil {
		d.free()
		delete(d.m.decs, d)
	}
	return nil
}

// free releases the decoder's C memory; the model's lock is held.
func (d *Decoder) free() {
	C.oj_gpt_decoder_free(d.dec)
	C.free(unsafe.Pointer(d.s))
	d.dec, d.s = nil, nil
}
