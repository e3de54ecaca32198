package ojas

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A checkpoint whose model file lost a byte is ErrCorrupt (its hash), a
// missing one ErrIO, a garbage config.json ErrCorrupt; the process goes on.
func TestBadFiles(t *testing.T) {
	dir := fixture(t)
	run := filepath.Join(dir, "corrupt")
	tr := trainSteps(t, fixtureConfigExact(t), TrainOptions{OutDir: run}, 1)
	ck, err := tr.SaveCheckpoint()
	tr.Close()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(ck, "model.safetensors")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadModel(context.Background(), ck, LoadOptions{})
	var oe *Error
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &oe) || oe.Status != "OJ_ERR_CORRUPT" ||
		!strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("corrupt checkpoint: %v", err)
	}
	if _, err := Resume(context.Background(), ck, TrainOptions{OutDir: filepath.Join(dir, "r")}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("resume from a corrupt checkpoint: %v", err)
	}
	if _, err := LoadModel(context.Background(), filepath.Join(dir, "nowhere"), LoadOptions{}); !errors.Is(err, ErrIO) {
		t.Fatalf("missing: %v", err)
	}
	hf := filepath.Join(dir, "hf-bad")
	os.MkdirAll(hf, 0o755)
	os.WriteFile(filepath.Join(hf, "config.json"), []byte("{not json"), 0o644)
	if _, err := LoadModel(context.Background(), hf, LoadOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad config.json: %v", err)
	}
	if _, err := LoadTokenizer(filepath.Join(dir, "nowhere")); err == nil {
		t.Fatal("a missing tokenizer loaded")
	}
	if _, err := LoadRunConfig(filepath.Join(dir, "corpus.txt")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a config that is not JSON: %v", err)
	}
}

// A device that cannot open is ErrDevice naming it, never a CPU model.
// Run where no GPU is visible (CUDA_VISIBLE_DEVICES="" in a child process
// when this one has one), so the case is tested on every machine.
func TestDeviceCannotOpen(t *testing.T) {
	if os.Getenv("OJAS_GO_NO_GPU") == "" && len(SystemProfile().CUDADevices) > 0 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDeviceCannotOpen$")
		cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES=", "OJAS_GO_NO_GPU=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return
	}
	_, err := NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{Device: "cuda"})
	if !errors.Is(err, ErrDevice) {
		t.Fatalf("cuda without a GPU: %v", err)
	}
	_, err = LoadModel(context.Background(), "nowhere", LoadOptions{Device: "cuda:3"})
	if !errors.Is(err, ErrDevice) {
		t.Fatalf("cuda:3: %v", err)
	}
	cfg := DefaultRunConfig()
	if err := cfg.Set("device=cuda", "model=nanolab-tiny"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTrainer(context.Background(), cfg, TrainOptions{OutDir: t.TempDir() + "/x"}); !errors.Is(err, ErrDevice) {
		t.Fatalf("trainer on cuda: %v", err)
	}
	if _, err := NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{Device: "tpu"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tpu: %v", err)
	}
}

// A budget too small for the model is ErrCapacity; the process memory
// ceiling holds two models to it together, is refused while models are
// open and above host memory, and goes when set to 0.
func TestCapacity(t *testing.T) {
	_, err := NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{BudgetBytes: 64 << 10})
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("64 KiB budget: %v", err)
	}
	if err := SetMemoryCeiling(1 << 62); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ceiling above memory: %v", err)
	}
	a, err := NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used, _ := a.MemoryBytes()
	if err := SetMemoryCeiling(4 << 20); !errors.Is(err, ErrState) {
		t.Fatalf("ceiling while a model is open: %v", err)
	}
	a.Close()
	// room for one tiny model's weights, not two
	if err := SetMemoryCeiling(used * 3 / 2); err != nil {
		t.Fatal(err)
	}
	defer SetMemoryCeiling(0)
	a, err = NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewModel(ModelSpec{Preset: "nanolab-tiny", Seed: 1}, LoadOptions{})
	if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "process memory ceiling") {
		t.Fatalf("second model over the ceiling: %v", err)
	}
	if _, err := a.Generate(context.Background(), []int32{1, 2}, SampleOptions{MaxNewTokens: 2}, nil); err != nil {
		t.Fatalf("the first model after the refusal: %v", err)
	}
	a.Close()
	if err := SetMemoryCeiling(0); err != nil {
		t.Fatal(err)
	}
	if lim, use := MemoryCeiling(); lim != 0 || use != 0 {
		t.Fatalf("ceiling %d, %d used", lim, use)
	}
}

func TestSystemProfile(t *testing.T) {
	p := SystemProfile()
	if p.Cores < 1 || p.MemoryBytes <= 0 || p.CPUModel == "" {
		t.Fatalf("%+v", p)
	}
	if len(p.CUDADevices) == 0 && p.CUDAError == "" {
		t.Fatalf("no CUDA device and no reason: %+v", p)
	}
}
