package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ruleState is what the status of one RateLimitRule should say after the last
// publish. The snapshot reconciler writes it; the status reconciler reads it.
type ruleState struct {
	verdict
	// PublishedVersion is the snapshot version in which this generation of the
	// rule was first published; 0 when the rule is not published.
	PublishedVersion int64
	// PublishError is why the snapshot holding this generation could not be
	// written; empty when it was.
	PublishError string
}

// publishedState holds the ruleState of every rule seen by the last publish.
// Safe for concurrent use.
type publishedState struct {
	mu    sync.RWMutex
	rules map[types.UID]ruleState
}

func newPublishedState() *publishedState {
	return &publishedState{rules: map[types.UID]ruleState{}}
}

// get returns the state of uid, and false when the last publish did not see it.
func (p *publishedState) get(uid types.UID) (ruleState, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s, ok := p.rules[uid]
	return s, ok
}

// snapshot returns the current map; callers must not modify it.
func (p *publishedState) snapshot() map[types.UID]ruleState {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.rules
}

// replace swaps in the state of a new publish.
func (p *publishedState) replace(next map[types.UID]ruleState) {
	p.mu.Lock()
	p.rules = next
	p.mu.Unlock()
}
