// Package filewatch keeps a value parsed from a file up to date: the
// gateway's route table and its rate limit domains use it.
//
// It polls rather than using file system notifications on purpose:
// Kubernetes updates ConfigMap volumes by swapping symlinks, which
// inotify-based watchers handle badly. A change is detected by hashing the
// file content, so touching the file without changing it does nothing.
// Writers should replace the file atomically (write elsewhere, then rename),
// as the kubelet does.
package filewatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Watcher. The zero value is usable.
type Options[T any] struct {
	// Interval is how often the file is read; zero or negative means 1s.
	Interval time.Duration
	// OnReload, if set, is called from Run after a changed, valid file has
	// been swapped in, with the new value.
	OnReload func(*T)
	// OnError, if set, is called from Run when the file cannot be read or is
	// invalid; the last good value stays in use. It is called once per
	// distinct bad content (or read error), not on every poll.
	OnError func(error)
}

// Watcher serves the last valid content of one file.
type Watcher[T any] struct {
	path  string
	read  func(string) ([]byte, error)
	parse func([]byte) (*T, error)
	opts  Options[T]
	cur   atomic.Pointer[T]

	mu       sync.Mutex // serializes polls
	goodHash [sha256.Size]byte
	badHash  [sha256.Size]byte // of the last reported bad content or error
	bad      bool              // whether badHash is set
}

// New reads and parses the file at path and returns a Watcher serving it;
// it fails if the file cannot be read or parsed. Call Run to follow changes.
func New[T any](path string, read func(string) ([]byte, error), parse func([]byte) (*T, error), opts Options[T]) (*Watcher[T], error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	data, err := read(path)
	if err != nil {
		return nil, err
	}
	v, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w := &Watcher[T]{path: path, read: read, parse: parse, opts: opts, goodHash: sha256.Sum256(data)}
	w.cur.Store(v)
	return w, nil
}

// Current returns the value in use; never nil, safe from any goroutine.
func (w *Watcher[T]) Current() *T { return w.cur.Load() }

// Run polls the file until ctx is done, starting with an immediate poll.
// Callbacks run on Run's goroutine.
func (w *Watcher[T]) Run(ctx context.Context) {
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		w.Poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Poll reads the file once and applies or reports what it finds.
func (w *Watcher[T]) Poll() {
	w.mu.Lock()
	defer w.mu.Unlock()

	data, err := w.read(w.path)
	if err != nil {
		w.report(sha256.Sum256([]byte("read error\x00"+err.Error())), err)
		return
	}
	sum := sha256.Sum256(data)
	if sum == w.goodHash {
		w.bad = false // back to good content: report a later failure again
		return
	}
	if w.bad && sum == w.badHash {
		return
	}
	v, err := w.parse(data)
	if err != nil {
		w.report(sum, fmt.Errorf("%s: %w", w.path, err))
		return
	}
	w.goodHash, w.bad = sum, false
	w.cur.Store(v)
	if w.opts.OnReload != nil {
		w.opts.OnReload(v)
	}
}

// report calls OnError unless the same failure was the last one reported.
func (w *Watcher[T]) report(sum [sha256.Size]byte, err error) {
	if w.bad && sum == w.badHash {
		return
	}
	w.badHash, w.bad = sum, true
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}
