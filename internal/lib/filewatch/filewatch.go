// Package filewatch keeps a value parsed from a file (or a set of files) up
// to date, and reads files with a size bound. The gateway's route table, its
// rate limit domains, its API key file and its file rule source use it.
//
// It polls rather than using file system notifications on purpose:
// Kubernetes updates ConfigMap and Secret volumes by swapping symlinks, which
// inotify-based watchers handle badly. A change is detected by hashing the
// content, so touching a file without changing it does nothing. Writers
// should replace files atomically (write elsewhere, then rename), as the
// kubelet does.
package filewatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ReadFile reads the file at path, failing if it holds more than max bytes.
// Open errors are returned as they are (errors.Is(err, fs.ErrNotExist)
// works); the others name the path.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return data, nil
}

// Load reads the file at path (at most max bytes) and parses it once; parse
// errors are prefixed with the path. It is what New does first.
func Load[T any](path string, max int64, parse func([]byte) (*T, error)) (*T, error) {
	data, err := ReadFile(path, max)
	if err != nil {
		return nil, err
	}
	return parseFile(path, data, parse)
}

func parseFile[T any](path string, data []byte, parse func([]byte) (*T, error)) (*T, error) {
	v, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

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
	// OnPoll, if set, is called at the end of every poll, from Run's
	// goroutine; tests use it to wait for polls.
	OnPoll func()
}

// Content is what one read of a watched source found: a digest that
// identifies it and a function that parses it. Parse is called only when the
// digest differs from the last good and the last reported bad content.
type Content[T any] struct {
	Sum   [sha256.Size]byte
	Parse func() (*T, error)
}

// Watcher serves the last valid content of a source.
type Watcher[T any] struct {
	read func() (Content[T], error)
	opts Options[T]
	cur  atomic.Pointer[T]

	mu       sync.Mutex // serializes polls
	goodHash [sha256.Size]byte
	badHash  [sha256.Size]byte // of the last reported bad content or error
	bad      bool              // whether badHash is set
}

// New reads the file at path (at most max bytes) and parses it, and returns
// a Watcher serving it; it fails if the file cannot be read or parsed. Parse
// errors are prefixed with the path. Call Run to follow changes.
func New[T any](path string, max int64, parse func([]byte) (*T, error), opts Options[T]) (*Watcher[T], error) {
	return NewSource(func() (Content[T], error) {
		data, err := ReadFile(path, max)
		if err != nil {
			return Content[T]{}, err
		}
		return Content[T]{Sum: sha256.Sum256(data), Parse: func() (*T, error) {
			return parseFile(path, data, parse)
		}}, nil
	}, opts)
}

// NewSource is New for a source other than one file (several files, say):
// read reads it whole and returns its Content. It fails if the first read or
// parse does.
func NewSource[T any](read func() (Content[T], error), opts Options[T]) (*Watcher[T], error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	c, err := read()
	if err != nil {
		return nil, err
	}
	v, err := c.Parse()
	if err != nil {
		return nil, err
	}
	w := &Watcher[T]{read: read, opts: opts, goodHash: c.Sum}
	w.cur.Store(v)
	return w, nil
}

// Current returns the value in use; never nil, safe from any goroutine.
func (w *Watcher[T]) Current() *T { return w.cur.Load() }

// Run polls the source until ctx is done, starting with an immediate poll,
// and returns nil then: a bad version is reported (OnError) and the last
// good one kept, never an error of Run. Callbacks run on Run's goroutine.
func (w *Watcher[T]) Run(ctx context.Context) error {
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		w.Poll()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Loaded is true: New fails unless the first version loads.
func (w *Watcher[T]) Loaded() bool { return true }

// Poll reads the source once and applies or reports what it finds.
func (w *Watcher[T]) Poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opts.OnPoll != nil {
		defer w.opts.OnPoll()
	}

	c, err := w.read()
	if err != nil {
		w.report(sha256.Sum256([]byte("read error\x00"+err.Error())), err)
		return
	}
	if c.Sum == w.goodHash {
		w.bad = false // back to good content: report a later failure again
		return
	}
	if w.bad && c.Sum == w.badHash {
		return
	}
	v, err := c.Parse()
	if err != nil {
		w.report(c.Sum, err)
		return
	}
	w.goodHash, w.bad = c.Sum, false
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
