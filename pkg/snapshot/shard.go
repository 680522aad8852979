package snapshot

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/pkg/gzipped"
)

// Labels and annotations of shard ConfigMaps.
const (
	// LabelSnapshot selects every shard of one snapshot; its value is the
	// snapshot name (the ConfigMap name prefix).
	LabelSnapshot = "ratelimit.tollgate.dev/snapshot"
	// LabelManagedBy marks objects the controller owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the LabelManagedBy value.
	ManagedByValue = "tollgate-controller"

	AnnotationIndex    = "ratelimit.tollgate.dev/shard-index"
	AnnotationCount    = "ratelimit.tollgate.dev/shard-count"
	AnnotationVersion  = "ratelimit.tollgate.dev/version"
	AnnotationChecksum = "ratelimit.tollgate.dev/checksum"
	AnnotationRules    = "ratelimit.tollgate.dev/rules"

	// DataKey is the binaryData key holding the compressed shard.
	DataKey = "rules.json.gz"
)

// Snapshot formats. Every shard payload carries its format; a reader refuses
// a format it does not know (the gateway keeps its last good snapshot and
// counts the error), so a writer must not use a format its readers predate.
const (
	// FormatTenant (1) places the rules of a tenant in one shard (by a hash
	// of the tenant). Past about 100,000 rules of one tenant (far fewer with
	// long names) that shard exceeds the size bound whatever the shard count,
	// and publishing stops for every tenant. Every gateway reads it.
	FormatTenant = 1
	// Format (2) is the newest format: it places each rule by its tenant and
	// route (ShardIndex), so that one tenant with very many rules (or tenant
	// "*" with one rule per route) is spread over every shard. Gateways
	// of 0.1 (built before commit 6db5501) do not read it.
	Format = 2
)

// DefaultWriteFormat is the format the controller writes unless told
// otherwise (--snapshot-format): the newest format that gateways of the
// previous minor version read, so that gateways not yet upgraded keep
// enforcing the current rules during a rolling upgrade. It moves to Format in
// the minor release after the one whose gateways first read Format
// (docs/upgrading.md keeps the compatibility window).
const DefaultWriteFormat = FormatTenant

// ReadFormats are the formats this build reads, oldest first.
func ReadFormats() []int { return []int{FormatTenant, Format} }

// ValidFormat reports whether this build reads and writes format f.
func ValidFormat(f int) bool { return f == FormatTenant || f == Format }

// Size bounds of a shard.
const (
	// TargetRulesPerShard is how many rules a shard holds on average before the
	// shard count doubles.
	TargetRulesPerShard = 4096
	// MaxShardBytes bounds a shard's compressed payload, well under the API
	// server's 1 MiB object limit.
	MaxShardBytes = 512 << 10
	// MaxDecodedBytes bounds a shard's uncompressed JSON. The writer splits
	// the rules over more shards rather than exceed it, and a reader stops
	// decompressing past it: a small crafted ConfigMap that inflates to
	// gigabytes (a gzip bomb) costs a gateway at most this much memory.
	MaxDecodedBytes = 4 << 20
	// MaxShards bounds the shard count a reader accepts.
	MaxShards = 4096
	// MaxVersion bounds shard versions (2^53-1, exact in every JSON reader).
	// A reader refuses a higher version, and the writer reports an error
	// rather than overflow: a version annotation raised near MaxInt64 by
	// someone who can edit ConfigMaps cannot wrap the next version around.
	MaxVersion = 1<<53 - 1
)

// ErrVersionExhausted is returned when the next shard version would exceed
// MaxVersion.
var ErrVersionExhausted = errors.New("snapshot version exhausted")

// ErrTooLarge is returned by Shard.ConfigMap when the compressed shard exceeds
// MaxShardBytes; the writer should use more shards.
var ErrTooLarge = errors.New("shard too large")

// Shard is one decoded shard. Treat it as immutable once built.
type Shard struct {
	Index int
	Count int
	// Format is the encoding the shard was read in (Format for new shards);
	// it decides where each rule belongs (see Shard.placement).
	Format int
	// Version increases every time the controller rewrites the shard.
	Version int64
	// Checksum identifies the rules (not the version): equal checksums mean
	// equal content.
	Checksum string
	// Rules are sorted by tenant, then route.
	Rules []Rule

	byKey map[lookupKey]*Rule
}

// lookupKey is byKey's key: a rule without claims by its kind, tenant
// and route.
type lookupKey struct{ kind, tenant, route string }

// ruleKey identifies a rule: its tenant, route and ClaimsKey.
type ruleKey struct{ kind, tenant, route, claims string }

// payload is the JSON stored (compressed) in a shard ConfigMap.
type payload struct {
	Format  int    `json:"format"`
	Index   int    `json:"index"`
	Count   int    `json:"count"`
	Version int64  `json:"version"`
	Rules   []Rule `json:"rules"`
}

// ShardIndex is the shard that holds the rule of tenant and route in a
// snapshot of count shards. count is a power of two.
func ShardIndex(tenant, route string, count int) int {
	if count <= 1 {
		return 0
	}
	// FNV-1a over tenant, a separator that neither may contain, and route;
	// inline so that the gateway's lookup does not allocate.
	h := fnvString(fnvString(fnvString(2166136261, tenant), "\x00"), route)
	return int(h % uint32(count))
}

// tenantShardIndex is where FormatTenant places the rules of tenant.
func tenantShardIndex(tenant string, count int) int {
	if count <= 1 {
		return 0
	}
	return int(fnvString(2166136261, tenant) % uint32(count))
}

func fnvString(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// Placement is the index of the shard that holds tenant+route in a snapshot
// of count shards written in format.
func Placement(format int, tenant, route string, count int) int {
	if format == FormatTenant {
		return tenantShardIndex(tenant, count)
	}
	return ShardIndex(tenant, route, count)
}

// ConfigMapName is the name of shard index of count in snapshot prefix.
func ConfigMapName(prefix string, index, count int) string {
	return prefix + "-" + strconv.Itoa(index) + "-of-" + strconv.Itoa(count)
}

// ParseConfigMapName returns the shard index and count that name has in
// snapshot prefix (see ConfigMapName), and false when name is not a shard
// name of that snapshot: decimal numbers without leading zeros, a count that
// is a power of two up to MaxShards, and an index below it.
func ParseConfigMapName(prefix, name string) (index, count int, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"-")
	if !found {
		return 0, 0, false
	}
	is, ns, found := strings.Cut(rest, "-of-")
	if !found {
		return 0, 0, false
	}
	index, err1 := strconv.Atoi(is)
	count, err2 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil || strconv.Itoa(index) != is || strconv.Itoa(count) != ns ||
		count < 1 || count > MaxShards || count&(count-1) != 0 || index < 0 || index >= count {
		return 0, 0, false
	}
	return index, count, true
}

// ManagedByController reports whether obj carries the controller's
// managed-by label (LabelManagedBy=ManagedByValue), which it puts on every
// object it writes: the shard ConfigMaps and, in Gateway API mode, the route
// table ConfigMap and its TLS Secret (pkg/routetable.Owned).
func ManagedByController(obj metav1.Object) bool {
	return obj.GetLabels()[LabelManagedBy] == ManagedByValue
}

// Owned reports whether obj is a shard ConfigMap of snapshot prefix that the
// controller owns: named <prefix>-<i>-of-<n> (ParseConfigMapName) and
// ManagedByController. It is the one rule of both halves: the controller
// updates and deletes only those (others carrying the snapshot label are
// reported and left alone), and gateways load only those (others are
// refused and reported), so an object the controller does not manage can
// never decide which snapshot is in force.
func Owned(prefix string, obj metav1.Object) bool {
	_, _, ok := ParseConfigMapName(prefix, obj.GetName())
	return ok && ManagedByController(obj)
}

// NewShard builds a shard in the newest Format from rules (which it sorts)
// and computes its checksum.
func NewShard(index, count int, version int64, rules []Rule) *Shard {
	return NewShardFormat(Format, index, count, version, rules)
}

// NewShardFormat is NewShard in format (which must be ValidFormat); rules must
// be partitioned for it (PartitionFormat).
func NewShardFormat(format, index, count int, version int64, rules []Rule) *Shard {
	sortRules(rules)
	s := &Shard{Index: index, Count: count, Format: format, Version: version, Rules: rules}
	s.Checksum = checksum(rules)
	return s
}

func sortRules(rules []Rule) {
	sort.Slice(rules, func(i, j int) bool {
		if rules[i].Tenant != rules[j].Tenant {
			return rules[i].Tenant < rules[j].Tenant
		}
		if rules[i].Route != rules[j].Route {
			return rules[i].Route < rules[j].Route
		}
		return rules[i].ClaimsKey() < rules[j].ClaimsKey()
	})
}

func checksum(rules []Rule) string {
	h := sha256.New()
	buf := make([]byte, 0, 4096)
	for i := range rules {
		buf = appendRule(buf, &rules[i])
		if len(buf) > 3072 {
			_, _ = h.Write(buf)
			buf = buf[:0]
		}
	}
	_, _ = h.Write(buf)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// index builds the lookup map of the rules without claims; NewSet calls
// it, so only readers pay for it.
func (s *Shard) index() {
	if s.byKey != nil {
		return
	}
	s.byKey = make(map[lookupKey]*Rule, len(s.Rules))
	for i := range s.Rules {
		r := &s.Rules[i]
		r.cacheKind()
		if len(r.Claims) == 0 {
			s.byKey[lookupKey{r.Kind(), r.Tenant, r.Route}] = r
		}
	}
}

// Get returns the rule of the default kind without claims for exactly
// tenant and route (either may be "*").
func (s *Shard) Get(tenant, route string) *Rule {
	return s.byKey[lookupKey{"", tenant, route}]
}

// Encode compresses the shard for a ConfigMap. The JSON is written by hand
// (see appendRule): the controller encodes every changed shard on every pass,
// and encoding/json's reflection was most of that time.
func (s *Shard) Encode() ([]byte, error) {
	raw := make([]byte, 0, 64+len(s.Rules)*72)
	raw = fmt.Appendf(raw, `{"format":%d,"index":%d,"count":%d,"version":%d,"rules":[`, s.Format, s.Index, s.Count, s.Version)
	for i := range s.Rules {
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = appendRule(raw, &s.Rules[i])
	}
	raw = append(raw, "]}\n"...)
	if len(raw) > MaxDecodedBytes {
		return nil, fmt.Errorf("%w: shard %d of %d is %d bytes uncompressed, over the %d byte bound", ErrTooLarge, s.Index, s.Count, len(raw), MaxDecodedBytes)
	}
	data, err := gzipped.Compress(raw, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("compressing shard %d: %w", s.Index, err)
	}
	return data, nil
}

// ConfigMap renders the shard as a ConfigMap of snapshot prefix in namespace.
func (s *Shard) ConfigMap(namespace, prefix string) (*corev1.ConfigMap, error) {
	data, err := s.Encode()
	if err != nil {
		return nil, err
	}
	if len(data) > MaxShardBytes {
		return nil, fmt.Errorf("%w: shard %d of %d is %d bytes compressed, over the %d byte bound", ErrTooLarge, s.Index, s.Count, len(data), MaxShardBytes)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ConfigMapName(prefix, s.Index, s.Count),
			Namespace: namespace,
			Labels: map[string]string{
				LabelSnapshot:  prefix,
				LabelManagedBy: ManagedByValue,
			},
			Annotations: map[string]string{
				AnnotationIndex:    strconv.Itoa(s.Index),
				AnnotationCount:    strconv.Itoa(s.Count),
				AnnotationVersion:  strconv.FormatInt(s.Version, 10),
				AnnotationChecksum: s.Checksum,
				AnnotationRules:    strconv.Itoa(len(s.Rules)),
			},
		},
		BinaryData: map[string][]byte{DataKey: data},
	}, nil
}

// Decode parses a compressed shard payload, checking everything: a malformed
// payload yields an error, never a panic or a partly filled shard.
func Decode(data []byte) (*Shard, error) {
	raw, err := gzipped.Decompress(data, MaxDecodedBytes)
	switch {
	case errors.Is(err, gzipped.ErrTooLarge):
		return nil, fmt.Errorf("shard decompresses to more than %d bytes, the bound the controller writes to", MaxDecodedBytes)
	case err != nil:
		return nil, fmt.Errorf("shard: %w", err)
	}
	var p payload
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("decoding shard JSON: %w", err)
	}
	if !ValidFormat(p.Format) {
		return nil, fmt.Errorf("shard format %d, this build reads formats %d and %d (written by a newer controller? upgrade the gateways first, or run the controller with --snapshot-format=%d)",
			p.Format, FormatTenant, Format, DefaultWriteFormat)
	}
	if p.Count < 1 || p.Count > MaxShards || p.Count&(p.Count-1) != 0 {
		return nil, fmt.Errorf("shard count %d is not a power of two in [1, %d]", p.Count, MaxShards)
	}
	if p.Index < 0 || p.Index >= p.Count {
		return nil, fmt.Errorf("shard index %d out of range for %d shards", p.Index, p.Count)
	}
	if p.Version < 0 || p.Version > MaxVersion {
		return nil, fmt.Errorf("shard version %d is out of range [0, %d]", p.Version, MaxVersion)
	}
	seen := make(map[ruleKey]struct{}, len(p.Rules))
	for i := range p.Rules {
		r := &p.Rules[i]
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if got := Placement(p.Format, r.Tenant, r.Route, p.Count); got != p.Index {
			return nil, fmt.Errorf("rule %d (tenant %q route %q) belongs in shard %d, found in shard %d", i, r.Tenant, r.Route, got, p.Index)
		}
		k := ruleKey{r.Kind(), r.Tenant, r.Route, r.ClaimsKey()}
		if _, dup := seen[k]; dup {
			return nil, fmt.Errorf("rule %d: duplicate tenant %q route %q%s%s", i, r.Tenant, r.Route, claimsNote(r), kindNote(r))
		}
		seen[k] = struct{}{}
	}
	return NewShardFormat(p.Format, p.Index, p.Count, p.Version, compact(p.Rules)), nil
}

// compact is rules as a gateway keeps them: in a slice of their own length
// (the decoder grew its slice as it read, up to a quarter more than it
// holds) and with one copy of each distinct route id (a few routes, each
// in thousands of rules).
func compact(rules []Rule) []Rule {
	out := make([]Rule, len(rules))
	copy(out, rules)
	routes := map[string]string{}
	for i := range out {
		r := &out[i]
		if seen, ok := routes[r.Route]; ok {
			r.Route = seen
		} else {
			routes[r.Route] = r.Route
		}
	}
	return out
}

// FromConfigMap decodes a shard ConfigMap and checks that its annotations
// agree with its payload.
func FromConfigMap(cm *corev1.ConfigMap) (*Shard, error) {
	data, ok := cm.BinaryData[DataKey]
	if !ok {
		return nil, fmt.Errorf("configmap %s/%s has no binaryData %q", cm.Namespace, cm.Name, DataKey)
	}
	s, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	var errs []error
	if want := ConfigMapName(cm.Labels[LabelSnapshot], s.Index, s.Count); cm.Name != want {
		errs = append(errs, fmt.Errorf("payload is shard %d of %d, which belongs in ConfigMap %q", s.Index, s.Count, want))
	}
	for key, want := range map[string]string{
		AnnotationIndex:   strconv.Itoa(s.Index),
		AnnotationCount:   strconv.Itoa(s.Count),
		AnnotationVersion: strconv.FormatInt(s.Version, 10),
	} {
		if got := cm.Annotations[key]; got != want {
			errs = append(errs, fmt.Errorf("annotation %s is %q, payload says %q", key, got, want))
		}
	}
	if sum := cm.Annotations[AnnotationChecksum]; sum != "" && sum != s.Checksum {
		errs = append(errs, fmt.Errorf("checksum annotation %q does not match the rules (%q)", sum, s.Checksum))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configmap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return s, nil
}
