// Package rules is the gateway's in-memory rule store and the two sources that
// keep it current: ConfigMapSource follows the sharded snapshot the controller
// publishes in a cluster, and FileSource follows RateLimitRule manifests on
// disk for a gateway that runs without Kubernetes.
//
// How it differs from its neighbours: snapshot (pkg/snapshot) is the compiled
// format both the controller and the gateway share; rules is where the
// gateway keeps the snapshot it enforces and how it gets there; routes
// (dataplane/routes) is the HTTP route table, which says which route id a
// request has, not how fast it may go.
//
// Sources decode and validate off the request path and swap a complete,
// immutable snapshot.Set into the Store atomically; a request only ever reads
// one consistent snapshot. Nothing here logs: problems are reported through
// the sources' callbacks and the caller decides how to log or count them.
package rules

import (
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Store holds the rule snapshot in force. It is safe for concurrent use: any
// number of goroutines may call Lookup while a source calls Replace.
type Store struct {
	def snapshot.Rule
	cur atomic.Pointer[loaded]
}

// loaded is a snapshot and the time it was swapped in; it is replaced as a
// whole so that readers never see one without the other.
type loaded struct {
	set *snapshot.Set
	at  time.Time
}

// NewStore returns an empty store whose Lookup answers defaultRule until a
// snapshot is loaded, and afterwards for every request that no rule of the
// snapshot matches. The caller is responsible for defaultRule being valid
// (see snapshot.Rule.Validate); its Tenant and Route are not consulted.
func NewStore(defaultRule snapshot.Rule) *Store {
	return &Store{def: defaultRule}
}

// Lookup returns the rule that governs tenant on route: the current
// snapshot's match by precedence (exact tenant and route, then tenant and
// "*", then "*" and route, then "*" and "*"), or the built-in default when
// nothing matches or no snapshot is loaded. It never returns nil and does not
// allocate. The returned rule is shared: do not modify it.
func (s *Store) Lookup(tenant, route string) *snapshot.Rule {
	if l := s.cur.Load(); l != nil {
		if r := l.set.Lookup(tenant, route); r != nil {
			return r
		}
	}
	return &s.def
}

// LookupClaims is Lookup for a request whose identity carries claims (a
// verified token's; nil: none), with the precedence of
// snapshot.Set.LookupClaims: a tenant's own rules, then the rules that
// match claims, then the "*" rules, then the built-in default. It never
// returns nil; it does not allocate unless claims does.
func (s *Store) LookupClaims(tenant, route string, claims snapshot.Claims) *snapshot.Rule {
	if l := s.cur.Load(); l != nil {
		if r := l.set.LookupClaims(tenant, route, claims); r != nil {
			return r
		}
	}
	return &s.def
}

// Extra appends to dst the rules in force for tenant on route (claims: the
// identity's, nil for none) of every kind other than the default, in the
// snapshot's kind order (snapshot.Set.Kinds): the limits that stack on the
// rule Lookup returns. tenant "" is a request without an identity: rules
// keyed by tenant do not apply to it. It returns dst unchanged, without
// allocating, when the snapshot has only the default kind.
func (s *Store) Extra(tenant, route string, claims snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule {
	l := s.cur.Load()
	if l == nil {
		return dst
	}
	for _, kind := range l.set.Kinds() {
		r := l.set.LookupKind(kind, tenant, route, claims)
		if r == nil || tenant == "" && r.Keyed(snapshot.PartTenant) {
			continue
		}
		dst = append(dst, r)
	}
	return dst
}

// Replace makes set the snapshot in force, atomically. Lookups that started
// before the swap may still return rules of the previous snapshot. A nil set
// unloads the store: Lookup then answers the default for everything.
func (s *Store) Replace(set *snapshot.Set) {
	if set == nil {
		s.cur.Store(nil)
		return
	}
	s.cur.Store(&loaded{set: set, at: time.Now()})
}

// Current returns the snapshot in force, or nil before the first Replace.
func (s *Store) Current() *snapshot.Set {
	if l := s.cur.Load(); l != nil {
		return l.set
	}
	return nil
}

// Loaded reports whether a snapshot is in force; a gateway is not ready to
// serve with its configured rules until it is.
func (s *Store) Loaded() bool {
	return s.cur.Load() != nil
}

// LoadedAt returns when the current snapshot was swapped in (for a snapshot
// age metric), or the zero time when none is loaded.
func (s *Store) LoadedAt() time.Time {
	if l := s.cur.Load(); l != nil {
		return l.at
	}
	return time.Time{}
}

// Version returns the current snapshot's version, or 0 when none is loaded.
func (s *Store) Version() int64 {
	if l := s.cur.Load(); l != nil {
		return l.set.Version()
	}
	return 0
}
