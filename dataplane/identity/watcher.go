package identity

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
)

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
// its changes with a filewatch.Watcher: it polls (Kubernetes updates Secret
// volumes by swapping symlinks, which inotify-based watchers handle badly),
// detects a change by hashing the content, and swaps a new Mapped in
// atomically, so Tenant never sees a partial update.
type MappedWatcher struct {
	w      *filewatch.Watcher[Mapped]
	polled func() // test hook, called after every poll
}

// NewMappedWatcher loads the key file at path and returns a MappedWatcher
// serving it; it fails if the file cannot be read or is invalid. Call Run to
// follow changes.
func NewMappedWatcher(path string, opts WatcherOptions) (*MappedWatcher, error) {
	mw := &MappedWatcher{}
	fo := filewatch.Options[Mapped]{
		Interval: opts.Interval,
		OnError:  opts.OnError,
		OnPoll: func() {
			if mw.polled != nil {
				mw.polled()
			}
		},
	}
	if opts.OnReload != nil {
		fo.OnReload = func(m *Mapped) { opts.OnReload(m.Len()) }
	}
	w, err := filewatch.New(path, maxFileSize, ParseMapped, fo)
	if err != nil {
		return nil, err
	}
	mw.w = w
	return mw, nil
}

// Current returns the keys in use: the last valid content of the file. It
// never returns nil.
func (w *MappedWatcher) Current() *Mapped {
	return w.w.Current()
}

// Tenant resolves key with the current keys; see Mapped.Tenant.
func (w *MappedWatcher) Tenant(key string) (string, error) {
	return w.w.Current().Tenant(key)
}

// Run polls the file until ctx is done, starting with an immediate poll,
// and returns nil then. Callbacks run on Run's goroutine.
func (w *MappedWatcher) Run(ctx context.Context) error { return w.w.Run(ctx) }

// Loaded is true: NewMappedWatcher fails unless the file loads.
func (w *MappedWatcher) Loaded() bool { return true }
