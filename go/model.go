package ojas

// #include <stdlib.h>
// #include "glue.h"
import "C"

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"
)

// Model is a GPT model on its own engine (or, from Trainer.Model, a view of
// a trainer's). Safe for concurrent use: calls are serialised.
type Model struct {
	h     *handle
	eng   *C.oj_engine
	gpt   *C.oj_gpt
	owned bool // false: a trainer's model, freed by the trainer
	decs  map[*Decoder]struct{}
}

// ModelConfig describes a model's architecture (oj_gpt_config).
type ModelConfig struct {
	Family    string // "gpt2", "nanolab" or "llama"
	VocabSize int64
	BlockSize int64 // maximum context
	Layers    int64
	Heads     int64
	KVHeads   int64
	Width     int64 // n_embd
}

// ModelSpec is a model to create from a preset with fresh parameters.
type ModelSpec struct {
	Preset    string // e.g. "nanolab-tiny", "gpt2-124m" (oj_gpt_preset)
	VocabSize int64  // 0: the preset's
	BlockSize int64  // 0: the preset's
	Seed      uint64 // parameter initialisation
}

func newModel(h *handle, eng *C.oj_engine, gpt *C.oj_gpt, owned bool) *Model {
	m := &Model{h: h, eng: eng, gpt: gpt, owned: owned, decs: map[*Decoder]struct{}{}}
	if owned {
		runtime.SetFinalizer(m, func(m *Model) { m.Close() })
	}
	return m
}

// LoadModel loads a model from dir on a new engine configured by opts:
// a Hugging Face model directory (config.json and model.safetensors or its
// shards: GPT-2, Llama, Mistral, Qwen2, Qwen3; oj_gpt_load_dir), or an ojas
// checkpoint directory or run directory written by `ojas train` or a
// Trainer (the newest good checkpoint; its training config gives the
// architecture). ctx is checked before loading starts; the load itself is
// one C call. Errors: ErrIO (missing files), ErrCorrupt (malformed or
// hash mismatch), ErrShape/ErrDtype (tensors that do not fit), ErrDevice
// (the device cannot open), ErrCapacity (the budget), ErrInvalid.
func LoadModel(ctx context.Context, dir string, opts LoadOptions) (*Model, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	eng, err := openEngine(opts)
	if err != nil {
		return nil, err
	}
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	var gpt *C.oj_gpt
	var e C.oj_error
	var st C.oj_status
	if _, serr := os.Stat(filepath.Join(dir, "config.json")); serr == nil {
		st = C.oj_gpt_load_dir(eng, cdir, &gpt, &e)
	} else {
		st = C.ojas_go_load_checkpoint(eng, cdir, &gpt, &e)
	}
	if st != C.OJ_OK {
		C.oj_engine_free(eng)
		return nil, fromC(st, &e)
	}
	return newModel(&handle{}, eng, gpt, true), nil
}

// NewModel creates a model from a preset with parameters initialised from
// spec.Seed, on a new engine configured by opts. Errors: ErrInvalid (an
// unknown preset or a bad config), ErrCapacity (the weights do not fit the
// budget), ErrDevice.
func NewModel(spec ModelSpec, opts LoadOptions) (*Model, error) {
	var cfg C.oj_gpt_config
	cp := C.CString(spec.Preset)
	ok := C.oj_gpt_preset(cp, &cfg)
	C.free(unsafe.Pointer(cp))
	if !ok {
		var buf [512]C.char
		C.oj_gpt_preset_list(&buf[0], C.size_t(len(buf)))
		return nil, &Error{Kind: ErrInvalid, Status: "OJ_ERR_INVALID_ARGUMENT",
			Message: fmt.Sprintf("unknown model preset %q (presets: %s)", spec.Preset, C.GoString(&buf[0]))}
	}
	if spec.VocabSize > 0 {
		cfg.vocab_size = C.int64_t(spec.VocabSize)
	}
	if spec.BlockSize > 0 {
		cfg.block_size = C.int64_t(spec.BlockSize)
	}
	eng, err := openEngine(opts)
	if err != nil {
		return nil, err
	}
	var gpt *C.oj_gpt
	if st := C.oj_gpt_create(eng, &cfg, C.uint64_t(spec.Seed), &gpt); st != C.OJ_OK {
		err := fromEngine(eng)
		if err == nil {
			err = newError(st, "")
		}
		C.oj_engine_free(eng)
		return nil, err
	}
	return newModel(&handle{}, eng, gpt, true), nil
}

// Config returns the model's architecture.
func (m *Model) Config() (ModelConfig, error) {
	if err := m.h.lock(); err != nil {
		return ModelConfig{}, err
	}
	defer m.h.unlock()
	c := C.oj_gpt_get_config(m.gpt)
	return ModelConfig{
		Family:    C.GoString(C.oj_gpt_family_name(c.family)),
		VocabSize: int64(c.vocab_size), BlockSize: int64(c.block_size),
		Layers: int64(c.n_layer), Heads: int64(c.n_head), KVHeads: int64(c.n_kv_head),
		Width: int64(c.n_embd),
	}, nil
}

// NumParams is the number of parameters (a tied head counted once).
func (m *Model) NumParams() (int64, error) {
	if err := m.h.lock(); err != nil {
		return 0, err
	}
	defer m.h.unlock()
	return int64(C.oj_gpt_num_params(m.gpt)), nil
}

// MemoryBytes is the number of bytes the model's engine holds now
// (storage of live tensors, oj_engine_memory_allocated).
func (m *Model) MemoryBytes() (int64, error) {
	if err := m.h.lock(); err != nil {
		return 0, err
	}
	defer m.h.unlock()
	return int64(C.oj_engine_memory_allocated(m.eng)), nil
}

// Close frees the model, its decoders and its engine. A model from
// Trainer.Model is the trainer's: Close does nothing to it (close the
// trainer). Closing twice is a no-op.
func (m *Model) Close() error {
	if !m.owned {
		return nil
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	if m.h.closed {
		return nil
	}
	m.h.closed = true
	for d := range m.decs {
		d.free()
	}
	m.decs = nil
	C.oj_gpt_free(m.gpt)
	C.oj_engine_free(m.eng)
	m.gpt, m.eng = nil, nil
	runtime.SetFinalizer(m, nil)
	return nil
}

// SaveSafetensors writes the model's parameters (its state_dict: Hugging
// Face names for gpt2 and llama models) to a safetensors file at path,
// atomically. With a Hugging Face config.json beside it, the directory
// loads with LoadModel. Errors: ErrIO, ErrInvalid.
func (m *Model) SaveSafetensors(path string) error {
	if err := m.h.lock(); err != nil {
		return err
	}
	defer m.h.unlock()
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	sd := C.oj_gpt_state_dict(m.gpt)
	var e C.oj_error
	return fromC(C.oj_safetensors_save(cp, sd.n, sd.names, sd.tensors, nil, &e), &e)
}
