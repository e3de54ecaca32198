package ojas

import (
	"context"
	"errors"
	"testing"
)

// Close frees a model's open decoders; every later call on the model or a
// decoder is ErrClosed, and closing again is harmless.
func TestCloseModelWithDecoder(t *testing.T) {
	m, err := NewModel(ModelSpec{Preset: "gpt2-tiny"}, LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.NumParams(); err != nil || n <= 0 {
		t.Fatalf("params %d %v", n, err)
	}
	d, err := m.NewDecoder(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prefill([]int32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Step(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Step(); !errors.Is(err, ErrClosed) {
		t.Fatalf("step after the model's Close: %v", err)
	}
	if _, err := m.Generate(context.Background(), []int32{1}, SampleOptions{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("generate after Close: %v", err)
	}
	d.Close()
	m.Close()
	if _, err := NewModel(ModelSpec{Preset: "no-such-model"}, LoadOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown preset: %v", err)
	}
}
