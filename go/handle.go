package ojas

import "sync"

// handle is the lock and the open/closed state shared by a C object and the
// views of it (a Trainer and its Model): every call holds mu, so calls on
// one engine are serialised, and none runs after Close.
type handle struct {
	mu     sync.Mutex
	closed bool
}

// lock takes the handle's lock, or returns ErrClosed (not holding it).
func (h *handle) lock() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (h *handle) unlock() { h.mu.Unlock() }
