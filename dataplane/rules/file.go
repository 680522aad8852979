package rules

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// defaultInterval is FileSource's poll interval when none is given.
const defaultInterval = time.Second

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
	// directory with no rule files. It is called once per loaded content
	// (for the first load, from NewFileSource).
	OnWarning func(msg string)
	// OnError, if set, is called from Run when the rule path cannot be read
	// or holds an invalid manifest; the last good snapshot stays in force.
	// It is called once per distinct bad content (or read error), not on
	// every poll.
	OnError func(error)
}

// FileSource keeps a Store loaded from RateLimitRule manifests on disk, for a
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
// FileSource polls rather than using file system notifications on purpose:
// Kubernetes updates ConfigMap volumes by swapping symlinks, which
// inotify-based watchers handle badly. A change is detected by hashing the
// file names and contents, so touching a file without changing it does
// nothing. Writers should replace files atomically (write elsewhere, then
// rename), as the kubelet does.
type FileSource struct {
	path  string
	store *Store
	opts  FileOptions

	mu       sync.Mutex // serializes loads
	version  int64      // of the last snapshot swapped in
	goodHash [sha256.Size]byte
	badHash  [sha256.Size]byte // of the last reported bad content or error
	bad      bool              // whether badHash is set
}

// NewFileSource loads the rules at path into store and returns a source that
// follows later changes when Run is called. It fails, leaving store
// untouched, if the path cannot be read or holds an invalid manifest.
func NewFileSource(path string, store *Store, opts FileOptions) (*FileSource, error) {
	if opts.Interval <= 0 {
		opts.Interval = defaultInterval
	}
	s := &FileSource{path: path, store: store, opts: opts}
	files, sum, err := readRuleFiles(path)
	if err != nil {
		return nil, err
	}
	if err := s.apply(files, sum); err != nil {
		return nil, err
	}
	return s, nil
}

// Run polls the rule path until ctx is done, starting with an immediate
// poll. Callbacks run on Run's goroutine.
func (s *FileSource) Run(ctx context.Context) {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	for {
		s.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// poll reads the rule path once and applies or reports what it finds.
func (s *FileSource) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()

	files, sum, err := readRuleFiles(s.path)
	if err != nil {
		s.report(sha256.Sum256([]byte("read error\x00"+err.Error())), err)
		return
	}
	if sum == s.goodHash {
		s.bad = false // back to good content: report a later failure again
		return
	}
	if s.bad && sum == s.badHash {
		return
	}
	if err := s.apply(files, sum); err != nil {
		s.report(sum, err)
	}
}

// apply compiles files and, if they are valid, swaps them into the store.
func (s *FileSource) apply(files []ruleFile, sum [sha256.Size]byte) error {
	rules, warnings, err := loadFiles(files)
	if err != nil {
		return fmt.Errorf("loading rules: %w", err)
	}
	if len(files) == 0 {
		warnings = append(warnings, fmt.Sprintf("%s: no *.yaml, *.yml or *.json files; no rules are in force", s.path))
	}
	s.version++
	set := snapshot.Build(rules, s.version)
	s.store.Replace(set)
	s.goodHash, s.bad = sum, false
	if s.opts.OnWarning != nil {
		for _, w := range warnings {
			s.opts.OnWarning(w)
		}
	}
	if s.opts.OnReload != nil {
		s.opts.OnReload(set)
	}
	return nil
}

// report calls OnError unless the same failure was the last one reported.
func (s *FileSource) report(sum [sha256.Size]byte, err error) {
	if s.bad && sum == s.badHash {
		return
	}
	s.badHash, s.bad = sum, true
	if s.opts.OnError != nil {
		s.opts.OnError(err)
	}
}
