package identity

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// defaultInterval is the MappedWatcher's poll interval when none is given.
const defaultInterval = time.Second

// WatcherOptions configures a MappedWatcher. The zero value is usable.
type WatcherOptions struct {
	// Interval is how often the file is read; zero or negative means 1s.
	Interval time.Duration
	// OnReload, if set, is called from Run after a changed, valid file has
	// been swapped in, with its number of keys.
	OnReload func(n int)
	// OnError, if set, is called from Run when the file cannot be read or is
	// invalid; the last good keys stay in use. It is called once per distinct
	// bad content (or read error), not on every poll. The error contains no
	// key material.
	OnError func(error)
}

// MappedWatcher is a Resolver serving a key file (see Mapped) and following
// its changes. It polls rather than using file system notifications on
// purpose: Kubernetes updates Secret volumes by swapping symlinks, which
// inotify-based watchers handle badly. A change is detected by hashing the
// content, and a new Mapped is swapped in atomically, so Tenant never sees a
// partial update.
type MappedWatcher struct {
	path string
	opts WatcherOptions
	cur  atomic.Pointer[Mapped]

	mu       sync.Mutex // serializes polls
	goodHash [sha256.Size]byte
	badHash  [sha256.Size]byte // of the last reported bad content or error
	bad      bool              // whether badHash is set
	polled   func()            // test hook, called after every poll
}

// NewMappedWatcher loads the key file at path and returns a MappedWatcher
// serving it; it fails if the file cannot be read or is invalid. Call Run to
// follow changes.
func NewMappedWatcher(path string, opts WatcherOptions) (*MappedWatcher, error) {
	if opts.Interval <= 0 {
		opts.Interval = defaultInterval
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	m, err := ParseMapped(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w := &MappedWatcher{path: path, opts: opts, goodHash: sha256.Sum256(data)}
	w.cur.Store(m)
	return w, nil
}

// Current returns the keys in use: the last valid content of the file. It
// never returns nil.
func (w *MappedWatcher) Current() *Mapped {
	return w.cur.Load()
}

// Tenant resolves key with the current keys; see Mapped.Tenant.
func (w *MappedWatcher) Tenant(key string) (string, error) {
	return w.cur.Load().Tenant(key)
}

// Run polls the file until ctx is done, starting with an immediate poll.
// Callbacks run on Run's goroutine.
func (w *MappedWatcher) Run(ctx context.Context) {
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
func (w *MappedWatcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polled != nil {
		defer w.polled()
	}

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
	m, err := ParseMapped(data)
	if err != nil {
		w.report(sum, fmt.Errorf("%s: %w", w.path, err))
		return
	}
	w.goodHash, w.bad = sum, false
	w.cur.Store(m)
	if w.opts.OnReload != nil {
		w.opts.OnReload(m.Len())
	}
}

// report calls OnError unless the same failure was the last one reported.
func (w *MappedWatcher) report(sum [sha256.Size]byte, err error) {
	if w.bad && sum == w.badHash {
		return
	}
	w.badHash, w.bad = sum, true
	if w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}
