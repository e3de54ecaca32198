package ojas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// sameCheckpoint: the model and optimizer files of two checkpoints have the
// same sha256 (state.json and the manifest hold per-run ids).
func sameCheckpoint(t *testing.T, a, b string) {
	t.Helper()
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		if ha, hb := sha(t, filepath.Join(a, f)), sha(t, filepath.Join(b, f)); ha != hb {
			t.Fatalf("%s differs: %s %s vs %s %s", f, a, ha, b, hb)
		}
	}
}

// trainSteps opens a trainer on cfg in out and takes n steps.
func trainSteps(t *testing.T, cfg *RunConfig, opts TrainOptions, n int) *Trainer {
	t.Helper()
	tr, err := OpenTrainer(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		r, err := tr.TrainStep(context.Background())
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		if r.Step != int64(i+1) || r.Tokens != r.Step*4*32 || !(r.Loss > 0) || !(r.GradNorm > 0) ||
			!(r.LR > 0) || !(r.TokensPerS > 0) {
			tr.Close()
			t.Fatalf("step %d: %+v", i+1, r)
		}
	}
	return tr
}

// A Go-driven run of the CLI tests' config under EXACT writes the same
// model and optimizer bytes as `ojas train`; so does a Go run cut in two by
// a checkpoint, Close and Resume.
func TestTrainMatchesCLI(t *testing.T) {
	dir := fixture(t)
	if err := runOjas(dir, "train", "--no-progress", "--no-plot", "--config", "c.json", "--out",
		"cli", "--numerics", "exact"); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "cli", "ckpt-000004")

	tr := trainSteps(t, fixtureConfigExact(t), TrainOptions{OutDir: filepath.Join(dir, "go")}, 4)
	if _, err := tr.TrainStep(context.Background()); !errors.Is(err, ErrState) {
		t.Fatalf("a step past max_steps: %v", err)
	}
	got, err := tr.SaveCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(got) != "ckpt-000004" {
		t.Fatalf("checkpoint %s", got)
	}
	tr.Close()
	sameCheckpoint(t, want, got)

	half := filepath.Join(dir, "go-half")
	tr = trainSteps(t, fixtureConfigExact(t), TrainOptions{OutDir: half}, 2)
	ck, err := tr.SaveCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("a step after Close: %v", err)
	}
	tr, err = Resume(context.Background(), ck, TrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if s, _ := tr.Step(); s != 2 {
		t.Fatalf("resumed at step %d", s)
	}
	for i := 0; i < 2; i++ {
		if _, err := tr.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got, err = tr.SaveCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, want, got)
	if l, _, err := tr.Eval(context.Background()); err != nil || !(l > 0) {
		t.Fatalf("eval: %v %v", l, err)
	}
}

// A cancelled context stops a training loop before the next step.
func TestTrainStepCancelled(t *testing.T) {
	dir := fixture(t)
	tr := trainSteps(t, fixtureConfigExact(t), TrainOptions{OutDir: filepath.Join(dir, "cancel")}, 1)
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.TrainStep(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled step: %v", err)
	}
	if s, _ := tr.Step(); s != 1 {
		t.Fatalf("a cancelled step ran: step %d", s)
	}
}

// A model loaded from a run directory is the trained one: its greedy
// tokens equal those of the trainer's own model; Generate stops when the
// callback says so and when its context is cancelled between tokens.
func TestLoadCheckpointAndGenerate(t *testing.T) {
	dir := fixture(t)
	run := filepath.Join(dir, "gen")
	tr := trainSteps(t, fixtureConfigExact(t), TrainOptions{OutDir: run}, 2)
	defer tr.Close()
	if _, err := tr.SaveCheckpoint(); err != nil {
		t.Fatal(err)
	}
	prompt := []int32{5, 17, 42}
	opts := SampleOptions{MaxNewTokens: 12}
	want, err := tr.Model().Generate(context.Background(), prompt, opts, nil)
	if err != nil || len(want) != 12 {
		t.Fatalf("trainer's model: %v %v", want, err)
	}
	m, err := LoadModel(context.Background(), run, LoadOptions{Numerics: Exact, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if c, _ := m.Config(); c.Family != "nanolab" || c.VocabSize != 512 {
		t.Fatalf("config %+v", c)
	}
	got, err := m.Generate(context.Background(), prompt, opts, nil)
	if err != nil || len(got) != len(want) {
		t.Fatalf("loaded: %v %v", got, err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("token %d: %d != %d", i, got[i], want[i])
		}
	}
	// the greedy decoder gives the same tokens
	d, err := m.NewDecoder(int64(len(prompt) + 12))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := d.Prefill(prompt)
	for i := 0; err == nil && i < 11; i++ {
		if tok != want[i] {
			t.Fatalf("decoder token %d: %d != %d", i, tok, want[i])
		}
		tok, err = d.Step()
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Close()

	n := 0
	got, err = m.Generate(context.Background(), prompt, opts, func(int32) bool { n++; return n < 3 })
	if err != nil || len(got) != 3 {
		t.Fatalf("stopped by the callback: %v %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got, err = m.Generate(ctx, prompt, SampleOptions{MaxNewTokens: 1000, Temperature: 0.8, Seed: 7},
		func(int32) bool { cancel(); return true })
	if !errors.Is(err, context.Canceled) || len(got) > 2 {
		t.Fatalf("cancelled: %d tokens, %v", len(got), err)
	}
	// an id outside the vocabulary is the engine's error, and the model serves the next call
	if _, err := m.Generate(context.Background(), []int32{99999}, opts, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := m.Generate(context.Background(), prompt, opts, nil); err != nil {
		t.Fatal(err)
	}
}
