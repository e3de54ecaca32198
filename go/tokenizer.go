package ojas

// #include <stdlib.h>
// #include "glue.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Tokenizer is a byte-level BPE tokenizer (ojas's own files, a
// tokenizer.json, GPT-2's encoder.json + vocab.bpe or a .tiktoken file).
// Safe for concurrent use: calls are serialised.
type Tokenizer struct {
	h   handle
	tok *C.oj_tokenizer
	s   *C.ojas_go_scratch // C memory: results of encode/decode
}

// LoadTokenizer loads the tokenizer in dir (oj_tokenizer_load: ojas's
// format, else tokenizer.json, else GPT-2's files, else one *.tiktoken).
// Errors: ErrIO, ErrCorrupt, ErrInvalid, naming the file.
func LoadTokenizer(dir string) (*Tokenizer, error) {
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	t := &Tokenizer{}
	var e C.oj_error
	if st := C.oj_tokenizer_load(cdir, &t.tok, &e); st != C.OJ_OK {
		return nil, fromC(st, &e)
	}
	t.s = (*C.ojas_go_scratch)(C.calloc(1, C.sizeof_ojas_go_scratch))
	if t.s == nil {
		C.oj_tokenizer_free(t.tok)
		return nil, &Error{Kind: ErrCapacity, Status: "OJ_ERR_CAPACITY", Message: "load tokenizer: out of host memory"}
	}
	runtime.SetFinalizer(t, func(t *Tokenizer) { t.Close() })
	return t, nil
}

// stringData is the address of s's bytes (Go 1.19 has no
// unsafe.StringData); nil for "". C reads them during the call only.
func stringData(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return *(**C.char)(unsafe.Pointer(&s))
}

func (t *Tokenizer) encode(text string, flags C.uint) ([]int32, error) {
	if err := t.h.lock(); err != nil {
		return nil, err
	}
	defer t.h.unlock()
	// a byte-level BPE token covers at least one byte: len(text) ids
	// suffice unless a template adds some; else a second call
	ids := make([]int32, len(text)+4)
	for {
		t.s.err.status = C.OJ_OK
		st := C.ojas_go_encode(t.tok, stringData(text), C.size_t(len(text)), flags,
			(*C.int32_t)(unsafe.Pointer(&ids[0])), C.size_t(len(ids)), &t.s.n, &t.s.err)
		if st != C.OJ_OK {
			return nil, fromC(st, &t.s.err)
		}
		n := t.s.n
		if int(n) <= len(ids) {
			return ids[:n], nil
		}
		ids = make([]int32, int(n))
	}
}

// Encode returns the token ids of text (any bytes). The text of a special
// token (e.g. "<|endoftext|>") is refused with ErrInvalid naming it and its
// offset; EncodeSpecial emits its id instead.
func (t *Tokenizer) Encode(text string) ([]int32, error) {
	return t.encode(text, C.OJ_ENCODE_REFUSE_SPECIAL)
}

// EncodeSpecial is Encode with special tokens' text encoded as their ids.
func (t *Tokenizer) EncodeSpecial(text string) ([]int32, error) {
	return t.encode(text, C.OJ_ENCODE_ALLOW_SPECIAL)
}

func (t *Tokenizer) decode(ids []int32, flags C.uint) (string, error) {
	if err := t.h.lock(); err != nil {
		return "", err
	}
	defer t.h.unlock()
	var p *C.int32_t
	if len(ids) > 0 {
		p = (*C.int32_t)(unsafe.Pointer(&ids[0]))
	}
	buf := make([]byte, 8*len(ids)+16) // most tokens are short; else a second call
	for {
		t.s.err.status = C.OJ_OK
		st := C.ojas_go_decode(t.tok, p, C.size_t(len(ids)), flags,
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &t.s.n, &t.s.err)
		if st != C.OJ_OK {
			return "", fromC(st, &t.s.err)
		}
		n := t.s.n
		if int(n) <= len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, int(n))
	}
}

// Decode returns the text of ids. Bytes that are not valid UTF-8 (a
// character cut between tokens) are ErrCorrupt naming the byte offset;
// ErrOutOfRange for an unknown id.
func (t *Tokenizer) Decode(ids []int32) (string, error) { return t.decode(ids, C.OJ_DECODE_STRICT) }

// DecodeLossy is Decode with invalid UTF-8 replaced by U+FFFD (one per
// maximal subpart, as WHATWG).
func (t *Tokenizer) DecodeLossy(ids []int32) (string, error) {
	return t.decode(ids, C.OJ_DECODE_LOSSY)
}

// DecodeBytes returns the raw bytes of ids, unchecked.
func (t *Tokenizer) DecodeBytes(ids []int32) ([]byte, error) {
	s, err := t.decode(ids, C.OJ_DECODE_BYTES)
	return []byte(s), err
}

// VocabSize is the number of ids.
func (t *Tokenizer) VocabSize() int32 {
	if t.h.lock() != nil {
		return 0
	}
	defer t.h.unlock()
	return int32(C.oj_tokenizer_vocab_size(t.tok))
}

// EOT is the end-of-text token's id, or -1 when there is none.
func (t *Tokenizer) EOT() int32 {
	if t.h.lock() != nil {
		return -1
	}
	defer t.h.unlock()
	return int32(C.oj_tokenizer_eot(t.tok))
}

// Close frees the tokenizer; closing twice is a no-op.
func (t *Tokenizer) Close() error {
	t.h.mu.Lock()
	defer t.h.mu.Unlock()
	if !t.h.closed {
		t.h.closed = true
		C.oj_tokenizer_free(t.tok)
		C.free(unsafe.Pointer(t.s))
		t.tok, t.s = nil, nil
		runtime.SetFinalizer(t, nil)
	}
	return nil
}
