package rules

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/lib/filewatch"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// FileOptions configures a FileSource. The zero value is usable.
type FileOptions struct {
	// Interval is how often the rule path is read; zero or negative means 1s.
	Interval time.Duration
	// OnReload, if set, is called after each snapshot the source swaps into
	// the store, the first one included (from NewFileSource; later ones from
	// Run's goroutine).
	OnReload func(*snapshot.Set)
	// OnWarning, if set, is called for each problem that does not stop a
	// load: a rule that loses a conflict for its tenant+route, or a rule
	// directory with no rule files. It is called once per compiled content
	// (for the first load, from NewFileSource).
	OnWarning func(msg string)
	// OnError, if set, is called from Run when the rule path cannot be read
	// or holds an invalid manifest; the last good snapshot stays in force.
	// It is called once per distinct bad content (or read error), not on
	// every poll.
	OnError func(error)
	// Clock is the time rules' spec.expiresAt is compared with; default
	// time.Now. Tests move it.
	Clock func() time.Time
}

// FileSource keeps a Store compiled from RateLimitRule manifests on disk, for a
// gateway that runs without Kubernetes. The path is a file, or a directory
// whose *.yaml, *.yml and *.json files (not those of subdirectories) are read
// in name order. Files hold manifests as users kubectl apply them: several
// YAML documents separated by "---" lines, each a RateLimitRule (apiVersion
// ratelimit.tollgate.dev/v1alpha1; metadata.name required; the namespace
// defaults to "default"), or a RateLimitRuleList or v1 List of them.
//
// A load checks what the API server and the controller would: strict
// decoding (unknown fields are errors), the CRD schema's rules, and unique
// namespace/names. Any invalid manifest fails the whole load, as kubectl apply
// refuses it. Where several rules name the same tenant+route, the first in
// namespace/name order is in force and the others are reported to OnWarning.
//
// FileSource follows the path with a filewatch.Watcher: it polls (Kubernetes
// updates ConfigMap volumes by swapping symlinks, which inotify-based
// watchers handle badly) and detects a change by hashing the file names and
// contents, so touching a file without changing it does nothing. Writers
// should replace files atomically (write elsewhere, then rename), as the
// kubelet does.
//
// A rule with spec.expiresAt is dropped at that time, as the controller
// drops it from its snapshot: Run compiles the same manifests again when
// the earliest expiry comes, and swaps in the snapshot without it.
type FileSource struct {
	path  string
	store *Store
	opts  FileOptions
	w     *filewatch.Watcher[compiled]

	mu      sync.Mutex // serializes install and expire
	cur     *compiled  // installed last
	version int64      // of the last snapshot swapped in
}

// compiled is one valid content of the rule path, compiled at one time.
type compiled struct {
	rules    []snapshot.Rule
	warnings []string
	// ms are the manifests compiled, to compile them again when a rule
	// expires; next is the earliest expiry still to come (zero: none).
	ms   []manifest
	next time.Time
}

// NewFileSource loads the rules at path into store and returns a source that
// follows later changes when Run is called. It fails, leaving store
// untouched, if the path cannot be read or holds an invalid manifest.
func NewFileSource(path string, store *Store, opts FileOptions) (*FileSource, error) {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &FileSource{path: path, store: store, opts: opts}
	w, err := filewatch.NewSource(s.read, filewatch.Options[compiled]{
		Interval: opts.Interval,
		OnReload: s.install,
		OnError:  opts.OnError,
	})
	if err != nil {
		return nil, err
	}
	s.w = w
	s.install(w.Current())
	return s, nil
}

// Run polls the rule path until ctx is done, starting with an immediate
// poll, and drops each temporary rule when its spec.expiresAt comes.
// Callbacks run on Run's goroutine. It returns nil when ctx ends.
func (s *FileSource) Run(ctx context.Context) error {
	interval := s.opts.Interval
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.poll()
		var expiry <-chan time.Time
		if d, ok := s.untilExpiry(); ok && d < interval {
			timer.Reset(d)
			expiry = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-expiry:
		}
		timer.Stop()
	}
}

// Loaded is true: NewFileSource fails unless the rules load.
func (s *FileSource) Loaded() bool { return true }

// poll reads the rule path once and applies or reports what it finds, then
// drops the rules that have expired since the last compile.
func (s *FileSource) poll() {
	s.w.Poll()
	s.expire()
}

// untilExpiry is the time until the next rule expires, false when none
// will.
func (s *FileSource) untilExpiry() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.next.IsZero() {
		return 0, false
	}
	return max(0, s.cur.next.Sub(s.opts.Clock())), true
}

// expire compiles the installed manifests again when the earliest expiry
// has come, and installs the result: the expired rules leave the snapshot
// without any change to the files.
func (s *FileSource) expire() {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	now := s.opts.Clock()
	if cur.next.IsZero() || now.Before(cur.next) {
		return
	}
	c, err := compileManifests(cur.ms, now)
	if err != nil {
		// The same manifests compiled before; only their expiries changed.
		if s.opts.OnError != nil {
			s.opts.OnError(fmt.Errorf("compiling the rules again at an expiry: %w", err))
		}
		return
	}
	s.install(c)
}

// read reads the rule files; their content compiles them.
func (s *FileSource) read() (filewatch.Content[compiled], error) {
	files, sum, err := readRuleFiles(s.path)
	if err != nil {
		return filewatch.Content[compiled]{}, err
	}
	return filewatch.Content[compiled]{Sum: sum, Parse: func() (*compiled, error) {
		c, err := loadFiles(files, s.opts.Clock())
		if err != nil {
			return nil, fmt.Errorf("loading rules: %w", err)
		}
		if len(files) == 0 {
			c.warnings = append(c.warnings, fmt.Sprintf("%s: no *.yaml, *.yml or *.json files; no rules are in force", s.path))
		}
		return c, nil
	}}, nil
}

// install swaps compiled rules into the store as a new snapshot version and
// reports them.
func (s *FileSource) install(l *compiled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = l
	s.version++
	set := snapshot.Build(l.rules, s.version)
	s.store.Replace(set)
	if s.opts.OnWarning != nil {
		for _, w := range l.warnings {
			s.opts.OnWarning(w)
		}
	}
	if s.opts.OnReload != nil {
		s.opts.OnReload(set)
	}
}
