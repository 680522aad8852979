package snapshot

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// Set is a complete snapshot: one shard for every index of one shard count.
// It is immutable and safe for concurrent readers; a new snapshot is a new
// Set.
type Set struct {
	shards  []*Shard
	format  int // of every shard
	version int64
	rules   int
	// claimed holds the rules with claims, by kind and route in
	// precedence order; nil when there are none.
	claimed claimRules
	// kinds are the kinds of rule other than the default, sorted; nil
	// when every rule is of the default kind.
	kinds []string
}

// NewSet assembles shards, which must all have the same count and format and
// cover every index exactly once.
func NewSet(shards []*Shard) (*Set, error) {
	if len(shards) == 0 {
		return nil, fmt.Errorf("a snapshot needs at least one shard")
	}
	count := shards[0].Count
	if len(shards) != count {
		return nil, fmt.Errorf("have %d shards of a %d-shard snapshot", len(shards), count)
	}
	s := &Set{shards: make([]*Shard, count), format: shards[0].Format}
	for _, sh := range shards {
		if sh.Count != count {
			return nil, fmt.Errorf("shard %d belongs to a %d-shard snapshot, not %d", sh.Index, sh.Count, count)
		}
		if sh.Format != s.format {
			return nil, fmt.Errorf("shard %d is in format %d, shard %d in format %d", sh.Index, sh.Format, shards[0].Index, s.format)
		}
		if s.shards[sh.Index] != nil {
			return nil, fmt.Errorf("shard %d given twice", sh.Index)
		}
		sh.index()
		s.indexClaims(sh)
		s.indexKinds(sh)
		s.shards[sh.Index] = sh
		s.rules += len(sh.Rules)
		s.version = max(s.version, sh.Version)
	}
	s.claimed.sort()
	sort.Strings(s.kinds)
	return s, nil
}

// indexKinds adds the kinds of sh's rules other than the default to
// s.kinds.
func (s *Set) indexKinds(sh *Shard) {
	for i := range sh.Rules {
		if k := sh.Rules[i].Kind(); k != "" && !slices.Contains(s.kinds, k) {
			s.kinds = append(s.kinds, k)
		}
	}
}

// Kinds are the kinds of rule of the snapshot other than the default
// (Rule.Kind), sorted; nil when there are none. Do not modify it.
func (s *Set) Kinds() []string { return s.kinds }

// LookupKind is LookupClaims among the rules of kind (Rule.Kind; "" is
// LookupClaims itself): the same precedence by tenant, claims and route.
// It returns nil when no rule of kind matches. It does not allocate.
func (s *Set) LookupKind(kind, tenant, route string, c Claims) *Rule {
	if r := s.getKind(kind, tenant, route); r != nil {
		return r
	}
	if r := s.getKind(kind, tenant, v1alpha1.Wildcard); r != nil {
		return r
	}
	if c != nil && s.claimed != nil {
		if r := s.claimed.match(kind, route, c); r != nil {
			return r
		}
		if r := s.claimed.match(kind, v1alpha1.Wildcard, c); r != nil {
			return r
		}
	}
	if r := s.getKind(kind, v1alpha1.Wildcard, route); r != nil {
		return r
	}
	return s.getKind(kind, v1alpha1.Wildcard, v1alpha1.Wildcard)
}

// indexClaims adds the rules of sh that have claims to s.claimed.
func (s *Set) indexClaims(sh *Shard) {
	for i := range sh.Rules {
		if r := &sh.Rules[i]; len(r.Claims) > 0 {
			if s.claimed == nil {
				s.claimed = claimRules{}
			}
			s.claimed.add(r)
		}
	}
}

// LookupClaims is Lookup for a request whose identity carries claims (nil:
// none). The precedence: exact tenant and route, then tenant and "*", then
// a rule with claims (tenant "*") for the route whose claims c all
// carries, then one for "*", then "*" and route, then "*" and "*". Among
// the claims rules of one route that c matches, the one with more claims
// wins, then the first by ClaimsKey. It does not allocate.
func (s *Set) LookupClaims(tenant, route string, c Claims) *Rule {
	if c == nil || s.claimed == nil {
		return s.Lookup(tenant, route)
	}
	if r := s.get(tenant, route); r != nil {
		return r
	}
	if r := s.get(tenant, v1alpha1.Wildcard); r != nil {
		return r
	}
	if r := s.claimed.match("", route, c); r != nil {
		return r
	}
	if r := s.claimed.match("", v1alpha1.Wildcard, c); r != nil {
		return r
	}
	if r := s.get(v1alpha1.Wildcard, route); r != nil {
		return r
	}
	return s.get(v1alpha1.Wildcard, v1alpha1.Wildcard)
}

// HasClaimRules reports whether any rule of the snapshot matches claims.
func (s *Set) HasClaimRules() bool { return s.claimed != nil }

// Lookup returns the rule that governs tenant on route, by precedence: exact
// tenant and route, then tenant and "*", then "*" and route, then "*" and "*".
// It returns nil when no rule matches; the caller applies its built-in default.
func (s *Set) Lookup(tenant, route string) *Rule {
	if r := s.get(tenant, route); r != nil {
		return r
	}
	if r := s.get(tenant, v1alpha1.Wildcard); r != nil {
		return r
	}
	if r := s.get(v1alpha1.Wildcard, route); r != nil {
		return r
	}
	return s.get(v1alpha1.Wildcard, v1alpha1.Wildcard)
}

// get returns the rule for exactly tenant and route, from the shard that
// holds it.
func (s *Set) get(tenant, route string) *Rule {
	return s.getKind("", tenant, route)
}

// getKind returns the rule of kind for exactly tenant and route.
func (s *Set) getKind(kind, tenant, route string) *Rule {
	return s.shards[Placement(s.format, tenant, route, len(s.shards))].byKey[lookupKey{kind, tenant, route}]
}

// Version is the highest shard version: the snapshot version a gateway reports
// and compares with a rule's status.publishedVersion.
func (s *Set) Version() int64 { return s.version }

// Len is the number of rules.
func (s *Set) Len() int { return s.rules }

// Shards returns the shards by index. Do not modify them.
func (s *Set) Shards() []*Shard { return s.shards }

// Empty is a snapshot with no rules.
func Empty() *Set {
	s, _ := NewSet([]*Shard{NewShard(0, 1, 0, nil)})
	return s
}

// ShardCount chooses the number of shards for n rules. current is the count
// in use (0 if none); it is kept while it still fits, so that adding or
// removing a few rules does not reshuffle every shard. The result is a power
// of two.
func ShardCount(n, current int) int {
	need := max(1, ceilPow2((n+TargetRulesPerShard-1)/TargetRulesPerShard))
	if current >= need && current < need*4 {
		return current
	}
	return need
}

func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Partition splits rules into count shards by tenant and route (ShardIndex,
// the newest Format). The result has count slices (some may be empty).
func Partition(rules []Rule, count int) [][]Rule {
	return PartitionFormat(rules, count, Format)
}

// PartitionFormat splits rules into count shards as format places them.
func PartitionFormat(rules []Rule, count, format int) [][]Rule {
	out := make([][]Rule, count)
	for _, r := range rules {
		i := Placement(format, r.Tenant, r.Route, count)
		out[i] = append(out[i], r)
	}
	return out
}

// Select assembles the newest complete snapshot from decoded shards, which
// may mix layouts while the controller changes the shard count: it groups
// shards by count, keeps the groups that cover every index, and returns the
// one with the highest version. It fails when no group is complete.
func Select(shards []*Shard) (*Set, error) {
	groups := map[int][]*Shard{}
	for _, sh := range shards {
		groups[sh.Count] = append(groups[sh.Count], sh)
	}
	var best *Set
	var errs []error
	for count, group := range groups {
		set, err := NewSet(group)
		if err != nil {
			errs = append(errs, fmt.Errorf("%d-shard layout: %w", count, err))
			continue
		}
		if best == nil || set.version > best.version || (set.version == best.version && set.Count() > best.Count()) {
			best = set
		}
	}
	if best == nil {
		if len(errs) == 0 {
			return nil, fmt.Errorf("no snapshot shards found")
		}
		return nil, fmt.Errorf("no complete snapshot: %w", errors.Join(errs...))
	}
	return best, nil
}

// Format is the format of every shard.
func (s *Set) Format() int { return s.format }

// Count is the number of shards.
func (s *Set) Count() int { return len(s.shards) }
