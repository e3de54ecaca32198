package ojas

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// A gpt2 model saved with SaveSafetensors beside a Hugging Face config.json
// loads with LoadModel as an HF directory and decodes the same tokens.
func TestHFDirectoryRoundTrip(t *testing.T) {
	m, err := NewModel(ModelSpec{Preset: "gpt2-tiny", Seed: 9}, LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, _ := m.Config()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
 "n_layer": %d, "n_head": %d, "n_embd": %d, "n_positions": %d, "n_inner": %d,
 "vocab_size": %d, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}`,
		c.Layers, c.Heads, c.Width, c.BlockSize, 4*c.Width, c.VocabSize)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveSafetensors(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	hf, err := LoadModel(context.Background(), dir, LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	if hc, _ := hf.Config(); hc != c {
		t.Fatalf("config %+v != %+v", hc, c)
	}
	prompt, opts := []int32{3, 1, 4, 1, 5}, SampleOptions{MaxNewTokens: 10}
	a, err := m.Generate(context.Background(), prompt, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hf.Generate(context.Background(), prompt, opts, nil)
	if err != nil || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("%v vs %v (%v)", a, b, err)
	}
	// a tensor of the wrong shape: config.json says a wider model
	bad := strings.Replace(cfg, fmt.Sprintf(`"n_embd": %d`, c.Width), fmt.Sprintf(`"n_embd": %d`, 2*c.Width), 1)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(bad), 0o644)
	if _, err := LoadModel(context.Background(), dir, LoadOptions{}); !errors.Is(err, ErrShape) {
		t.Fatalf("wrong shapes: %v", err)
	}
}
