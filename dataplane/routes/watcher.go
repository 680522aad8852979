package routes

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// defaultInterval is the Watcher's poll interval when none is given.
const defaultInterval = time.Second

// WatcherOptions configures a Watcher. The zero value is usable.
type WatcherOptions struct {
	// Interval is how often the file is read; zero or negative means 1s.
	Interval time.Duration
	// OnReload, if set, is called from Run after a changed, valid file has
	// been swapped in, with the new table.
	OnReload func(*Table)
	// OnError, if set, is called from Run when the file cannot be read or is
	// invalid; the last good table stays in use. It is called once per
	// distinct bad content (or read error), not on every poll.
	OnError func(error)
}

// Watcher keeps a Table loaded from a file up to date. It polls rather than
// using file system notifications on purpose: Kubernetes updates ConfigMap
// volumes by swapping symlinks, which inotify-based watchers handle badly.
// A change is detected by hashing the file content, so touching the file
// without changing it does nothing.
//
// Writers should replace the file atomically (write elsewhere, then rename),
// as the kubelet does; a poll that reads a half-written file that happens to
// be valid would apply it.
type Watcher struct {
	path string
	opts WatcherOptions
	cur  atomic.Pointer[Table]

	mu       sync.Mutex // serializes polls
	goodHash [sha256.Size]byte
	badHash  [sha256.Size]byte // of the last reported bad content or error
	bad      bool              // whether badHash is set
}

// NewWatcher loads the file at path and returns a Watcher serving it; it
// fails if the file cannot be read or is invalid. Call Run to follow changes.
func NewWatcher(path string, opts WatcherOptions) (*Watcher, error) {
	if opts.Interval <= 0 {
		opts.Interval = defaultInterval
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w := &Watcher{path: path, opts: opts, goodHash: sha256.Sum256(data)}
	w.cur.Store(t)
	return w, nil
}

// Current returns the table in use: the last valid content of the file. It
// never returns nil and is safe to call from any goroutine, typically once
// per request.
func (w *Watcher) Current() *Table {
	return w.cur.Load()
}

// Run polls the file until ctx is done, starting with an immediate poll.
// Callbacks run on Run's goroutine.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// poll reads the file once and applies or reports what it finds.
func (w *Watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()

	data, err := readFile(w.path)
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
	t, err := Parse(data)
	if err != nil {
		w.report(sum, fmt.Errorf("%s: %w", w.path, err))
		return
	}
	w.goodHash, w.bad = sum, false
	w.cur.Store(t)
	if w.opts.OnReload != nil {
		w.opts.OnReload(t)
	}
}

// report calls OnError unless the same failure was the last one reported.
func (w *Watcher) report(sum [sha256.Size]byte, err error) {
	if w.bad && sum == w.badHash {
		return
	}
	w.badHash, w.bad = sum, true
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}
