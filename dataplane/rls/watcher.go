package rls

import (
	"context"
	"crypto/sha256"
	"sync/atomic"
	"time"
)

// WatcherOptions configure a DomainsWatcher. The zero value is usable.
type WatcherOptions struct {
	// Interval is how often the file is read; zero or negative means 1s.
	Interval time.Duration
	// OnReload, if set, is called from Run after a changed, valid file has
	// been swapped in.
	OnReload func(*Domains)
	// OnError, if set, is called from Run when the file cannot be read or is
	// invalid; the last good configuration stays in use. It is called once
	// per distinct bad content or error, not on every poll.
	OnError func(error)
}

// DomainsWatcher keeps a domain configuration loaded from a file up to date.
// Like the route watcher it polls and compares content hashes, which works
// with Kubernetes' symlink-swapping ConfigMap volumes.
type DomainsWatcher struct {
	path string
	opts WatcherOptions
	cur  atomic.Pointer[Domains]

	goodHash, badHash [sha256.Size]byte
	bad               bool
}

// NewDomainsWatcher loads the file at path; it fails if the file cannot be
// read or is invalid. Call Run to follow changes.
func NewDomainsWatcher(path string, opts WatcherOptions) (*DomainsWatcher, error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	ds, data, err := LoadDomains(path)
	if err != nil {
		return nil, err
	}
	w := &DomainsWatcher{path: path, opts: opts, goodHash: sha256.Sum256(data)}
	w.cur.Store(ds)
	return w, nil
}

// Current returns the configuration in use; safe from any goroutine.
func (w *DomainsWatcher) Current() *Domains { return w.cur.Load() }

// Run polls the file until ctx is done. Callbacks run on Run's goroutine.
func (w *DomainsWatcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.poll()
	}
}

func (w *DomainsWatcher) poll() {
	data, err := readFile(w.path)
	if err != nil {
		w.report(sha256.Sum256([]byte("read error\x00"+err.Error())), err)
		return
	}
	sum := sha256.Sum256(data)
	if sum == w.goodHash {
		w.bad = false
		return
	}
	if w.bad && sum == w.badHash {
		return
	}
	ds, err := ParseDomains(data)
	if err != nil {
		w.report(sum, wrapPath(w.path, err))
		return
	}
	w.goodHash, w.bad = sum, false
	w.cur.Store(ds)
	if w.opts.OnReload != nil {
		w.opts.OnReload(ds)
	}
}

func (w *DomainsWatcher) report(sum [sha256.Size]byte, err error) {
	if w.bad && sum == w.badHash {
		return
	}
	w.badHash, w.bad = sum, true
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}

type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func wrapPath(path string, err error) error { return &pathError{path: path, err: err} }
