package ojas

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

func TestTokenizer(t *testing.T) {
	tok, err := LoadTokenizer(filepath.Join(fixture(t), "tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	if tok.VocabSize() != 300 || tok.EOT() < 0 {
		t.Fatalf("vocab %d eot %d", tok.VocabSize(), tok.EOT())
	}
	text := "The king said unto him: héllo\x00 ☃"
	ids, err := tok.Encode(text)
	if err != nil || len(ids) == 0 {
		t.Fatal(ids, err)
	}
	back, err := tok.Decode(ids)
	if err != nil || back != text {
		t.Fatalf("%q %v", back, err)
	}
	if _, err := tok.Encode("a <|endoftext|>"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("special refused: %v", err)
	}
	sp, err := tok.EncodeSpecial("<|endoftext|>")
	if err != nil || len(sp) != 1 || sp[0] != tok.EOT() {
		t.Fatalf("special: %v %v", sp, err)
	}
	// "é" is two bytes, each a token: half of it is not UTF-8
	e, _ := tok.Encode("é")
	if len(e) != 2 {
		t.Skipf("é is %d tokens", len(e))
	}
	if _, err := tok.Decode(e[:1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("strict decode of half a character: %v", err)
	}
	if s, err := tok.DecodeLossy(e[:1]); err != nil || s != "\uFFFD" {
		t.Fatalf("lossy: %q %v", s, err)
	}
	if _, err := tok.Decode([]int32{300}); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("unknown id: %v", err)
	}
	tok.Close()
	if _, err := tok.Encode("x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// One tokenizer and one model shared by goroutines (run under -race): every
// goroutine gets the same answers as a lone caller.
func TestConcurrentUse(t *testing.T) {
	tok, err := LoadTokenizer(filepath.Join(fixture(t), "tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	m, err := NewModel(ModelSpec{Preset: "nanolab-tiny", Seed: 3}, LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	wantIDs, _ := tok.Encode("the river and the stone")
	opts := SampleOptions{Temperature: 0.9, Seed: 11, MaxNewTokens: 6}
	wantGen, err := m.Generate(context.Background(), wantIDs, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				ids, err := tok.Encode("the river and the stone")
				if err != nil || len(ids) != len(wantIDs) {
					errs <- err
					return
				}
				gen, err := m.Generate(context.Background(), ids, opts, nil)
				if err != nil || len(gen) != len(wantGen) {
					errs <- err
					return
				}
				for k := range gen {
					if gen[k] != wantGen[k] {
						errs <- errors.New("different tokens")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
