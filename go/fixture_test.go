package ojas

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The run fixture of the C CLI tests (tests/unit/cli_testutil.h): a fixed
// corpus, a 300-id tokenizer and shards made with the ojas binary, and
// c.json, a 4-step nanolab-tiny run, one thread. Made once in TestMain;
// fixtureErr says why when it could not be.
var (
	fixtureDir string
	fixtureErr error
	ojasBin    string
)

// writeCorpus writes ct_write_corpus's ~14 KB of sentences (the same LCG).
func writeCorpus(path string) error {
	words := []string{"the", "king", "said", "unto", "him", "and", "of", "land", "people",
		"house", "lord", "went", "came", "day", "city", "water", "over", "river",
		"bread", "stone", "light", "night", "in", "they", "shall", "be", "upon"}
	var b strings.Builder
	s := uint32(2024)
	for sent := 0; sent < 420; sent++ {
		s = s*1664525 + 1013904223
		n := 4 + int((s>>24)%7)
		for w := 0; w < n; w++ {
			s = s*1664525 + 1013904223
			word := words[(s>>16)%uint32(len(words))]
			if w == 0 {
				b.WriteString(strings.ToUpper(word[:1]) + word[1:])
			} else {
				b.WriteString(" " + word)
			}
		}
		if sent%8 == 7 {
			b.WriteString(".\n")
		} else {
			b.WriteString(". ")
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const fixtureConfig = `{"model": "nanolab-tiny", "data_dir": "data", "batch_size": 4,
 "seq_len": 32, "max_steps": 4, "warmup_steps": 1, "eval_every": 2,
 "eval_batches": 1, "ckpt_every": 2, "peak_flops": 1e10, "threads": 1}
`

// runOjas runs `ojas args...` in dir; the error carries its output.
func runOjas(dir string, args ...string) error {
	cmd := exec.Command(ojasBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ojas %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func makeFixture() error {
	ojasBin = os.Getenv("OJAS_BIN")
	if ojasBin == "" {
		return fmt.Errorf("OJAS_BIN (the ojas binary) is not set; ctest sets it (cmake/go.cmake)")
	}
	dir, err := os.MkdirTemp("", "ojas-go-")
	if err != nil {
		return err
	}
	fixtureDir = dir
	if err := writeCorpus(filepath.Join(dir, "corpus.txt")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(fixtureConfig), 0o644); err != nil {
		return err
	}
	if err := runOjas(dir, "tokenizer", "train", "--vocab-size", "300", "--threads", "1", "--out",
		"tok", "corpus.txt"); err != nil {
		return err
	}
	return runOjas(dir, "data", "prepare", "--vocab", "tok", "--out", "data", "--threads", "1",
		"corpus.txt")
}

// fixture returns the fixture directory, failing t when it was not made.
func fixture(t testing.TB) string {
	t.Helper()
	if fixtureErr != nil {
		t.Fatalf("fixture: %v", fixtureErr)
	}
	return fixtureDir
}

// fixtureConfigExact is c.json with the data directory made absolute and
// numerics exact.
func fixtureConfigExact(t testing.TB) *RunConfig {
	t.Helper()
	dir := fixture(t)
	cfg, err := LoadRunConfig(filepath.Join(dir, "c.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Set("data_dir="+filepath.Join(dir, "data"), "numerics=exact"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestMain(m *testing.M) {
	fixtureErr = makeFixture()
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}
