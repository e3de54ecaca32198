package ojas

import (
	"path/filepath"
	"testing"
)

// The cost of the cgo boundary: each benchmark's "go" case makes one Go
// call per operation (lock, cgo call, copies), its "c" case runs the same
// C calls in a C loop (one cgo call in all). The difference per op is the
// Go binding's overhead (docs/go.md has measured numbers).

const shortText = "The king said unto him"

func BenchmarkEncode(b *testing.B) {
	tok, err := LoadTokenizer(filepath.Join(fixture(b), "tok"))
	if err != nil {
		b.Fatal(err)
	}
	defer tok.Close()
	b.Run("go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := tok.Encode(shortText); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("c", func(b *testing.B) {
		if err := encodeLoopC(tok, shortText, b.N); err != nil {
			b.Fatal(err)
		}
	})
}

// One greedy decode step of nanolab-tiny on one thread (a sliding window
// past its capacity, so any number of steps runs).
func BenchmarkDecodeStep(b *testing.B) {
	m, err := NewModel(ModelSpec{Preset: "nanolab-tiny"}, LoadOptions{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	d, err := m.NewDecoder(64)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Prefill([]int32{1, 2, 3}); err != nil {
		b.Fatal(err)
	}
	b.Run("go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := d.Step(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("c", func(b *testing.B) {
		if err := decodeStepLoopC(d, b.N); err != nil {
			b.Fatal(err)
		}
	})
}
