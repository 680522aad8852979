// Package routetable is the compiled Gateway API route table: what the
// controller makes of the HTTPRoutes and GRPCRoutes attached to tollgate's
// Gateways (with
// their backends resolved to endpoint addresses), and what gateways load from
// the route table ConfigMap to serve them. Like pkg/snapshot it is the format
// both halves share; matching lives in dataplane/httproutes.
package routetable

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/gzipped"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// ConfigMap layout of a route table.
const (
	// DataKey is the binaryData key holding the gzipped JSON table.
	DataKey = "httproutes.json.gz"
	// LabelRouteTable marks route table ConfigMaps; its value is the table
	// name (the ConfigMap name).
	LabelRouteTable = "ratelimit.tollgate.dev/route-table"
	// AnnotationChecksum is the SHA-256 of the uncompressed JSON.
	AnnotationChecksum = "ratelimit.tollgate.dev/checksum"
	// AnnotationRules is the number of compiled route rules, for humans.
	AnnotationRules = "ratelimit.tollgate.dev/rules"
	// DefaultName is the default route table ConfigMap name.
	DefaultName = "tollgate-httproutes"
	// Format is the table format written and accepted.
	Format = 1
	// MaxCompressedBytes bounds the ConfigMap payload (the API server's
	// object limit is 1 MiB).
	MaxCompressedBytes = 900 << 10
	// MaxDecodedBytes bounds the uncompressed JSON a reader accepts.
	MaxDecodedBytes = 64 << 20
)

// ErrTooLarge is returned when a table does not fit in one ConfigMap.
var ErrTooLarge = errors.New("route table too large for one ConfigMap")

// Table is a compiled route table.
type Table struct {
	Format int    `json:"format"`
	Rules  []Rule `json:"rules"`
	// TLS lists the HTTPS listeners the gateways terminate TLS for, with
	// references to their certificates; the key material itself is in the
	// Secret TLSSecretName(table name), never in this ConfigMap.
	TLS []TLSListener `json:"tls,omitempty"`
}

// TLSListener is one accepted HTTPS listener of one of tollgate's Gateways.
type TLSListener struct {
	// Listener is "namespace/gateway/listener", for logs.
	Listener string `json:"listener"`
	// Hostname is the listener's hostname: exact, "*.suffix", or "" for
	// every server name. Lower case.
	Hostname string `json:"hostname,omitempty"`
	// Certificates are the Secrets ("namespace/name") whose certificates
	// the listener serves, in the listener's order; each has its entries in
	// the TLS Secret (CertKeys).
	Certificates []string `json:"certificates"`
}

// Labels are the labels the controller puts on the route table ConfigMap
// table and on its TLS Secret.
func Labels(table string) map[string]string {
	return map[string]string{LabelRouteTable: table, snapshot.LabelManagedBy: snapshot.ManagedByValue}
}

// Owned reports whether obj, the route table ConfigMap table or its TLS
// Secret (the watches are of those names), is the controller's: it carries
// Labels(table) (snapshot.ManagedByController, the managed-by rule of the
// shards). Gateways load only such objects, and the controller rewrites any
// other object of those names with its labels (publishing writes over
// whatever holds the name), so a copy put there by someone else is refused
// until the controller's next pass replaces it.
func Owned(table string, obj metav1.Object) bool {
	return obj.GetLabels()[LabelRouteTable] == table && snapshot.ManagedByController(obj)
}

// DescribeLabels says, for messages, which labels Owned requires.
func DescribeLabels(table string) string {
	return fmt.Sprintf("the labels %s=%s and %s=%s", LabelRouteTable, table, snapshot.LabelManagedBy, snapshot.ManagedByValue)
}

// TLSSecretName is the name of the Secret holding the certificates and keys
// of the route table ConfigMap table: the controller copies the certificate
// Secrets of accepted HTTPS listeners into it, and the gateways read only
// that Secret.
func TLSSecretName(table string) string { return table + "-tls" }

// CertKeys are the data keys of the certificate chain and the private key
// (PEM) of the Secret ref ("namespace/name") in the TLS Secret:
// "<namespace>.<name>.crt" and ".key" (a namespace has no dot).
func CertKeys(ref string) (crt, key string) {
	k := strings.Replace(ref, "/", ".", 1)
	return k + ".crt", k + ".key"
}

// Rule is one HTTPRoute or GRPCRoute rule as attached to tollgate's
// listeners.
type Rule struct {
	// ID is the route id of the rule for rate limits and metrics; see
	// RuleID and GRPCRuleID.
	ID string `json:"id"`
	// Route is the HTTPRoute or GRPCRoute as "namespace/name".
	Route string `json:"route"`
	// GRPC: the rule is a GRPCRoute's. It matches gRPC calls only, by
	// their service and method (Match.GRPCService, GRPCMethod) and
	// headers; its matches have no path, method or query.
	GRPC bool `json:"grpc,omitempty"`
	// Created is the HTTPRoute's creationTimestamp (Unix seconds), for
	// precedence.
	Created int64 `json:"created"`
	// Index is the rule's position in the HTTPRoute.
	Index int `json:"index"`
	// Hostnames the rule serves: exact names or "*.suffix" wildcards, lower
	// case; empty means every host.
	Hostnames []string `json:"hostnames,omitempty"`
	// Matches of the rule; a request matching any of them matches the rule.
	// Never empty (the API defaults a rule without matches to PathPrefix /).
	Matches []Match `json:"matches"`
	// Filters are applied in order.
	Filters []Filter `json:"filters,omitempty"`
	// Backends, chosen by weight per request. A rule without backends and
	// without a redirect answers 500.
	Backends []Backend `json:"backends,omitempty"`
	// RequestTimeoutMs bounds the whole request (timeouts.request); 0: none.
	RequestTimeoutMs int64 `json:"requestTimeoutMs,omitempty"`
	// BackendTimeoutMs bounds the wait for the backend's response headers
	// (timeouts.backendRequest); 0: the gateway's default.
	BackendTimeoutMs int64 `json:"backendTimeoutMs,omitempty"`
	// TLS: the rule is attached to HTTPS listeners and serves requests
	// that arrived over TLS only; otherwise it serves plain HTTP requests
	// only. A route attached to both kinds of listener has one rule of each.
	TLS bool `json:"tls,omitempty"`
	// ForwardAuthorization: the HTTPRoute's annotation
	// AnnotationForwardAuthorization is "true": the Authorization header
	// goes upstream even when the request's identity came from it.
	ForwardAuthorization bool `json:"forwardAuthorization,omitempty"`
	// IdentityMode is the HTTPRoute's annotation AnnotationIdentity:
	// "" (required), "optional" or "none".
	IdentityMode string `json:"identity,omitempty"`
}

// AnnotationIdentity on an HTTPRoute is what its rules require of a
// request's identity: required (the default), optional (a request without
// a credential is anonymous, limited by the rules not keyed by tenant) or
// none (credentials are never read). Another value is refused: the route
// stays required and its Accepted condition says why.
const AnnotationIdentity = "ratelimit.tollgate.dev/identity"

// AnnotationForwardAuthorization on an HTTPRoute, "true", makes its rules
// forward the Authorization header upstream even when the gateway
// identified the request by its bearer token (the upstream verifies the
// token too); by default the gateway removes the header then.
const AnnotationForwardAuthorization = "ratelimit.tollgate.dev/forward-authorization"

// Path match types.
const (
	PathExact  = "Exact"
	PathPrefix = "PathPrefix"
)

// Match is one HTTPRouteMatch, or one GRPCRouteMatch.
type Match struct {
	// PathType is PathExact or PathPrefix; PathValue starts with "/". A
	// prefix is stored without its trailing slash, except "/". Empty in a
	// GRPCRoute's match.
	PathType  string `json:"pathType,omitempty"`
	PathValue string `json:"path,omitempty"`
	// GRPCService and GRPCMethod, in a GRPCRoute's match, must equal the
	// call's service and method (its path is /<service>/<method>); ""
	// matches any.
	GRPCService string `json:"grpcService,omitempty"`
	GRPCMethod  string `json:"grpcMethod,omitempty"`
	// Method, when set, must equal the request's.
	Method string `json:"method,omitempty"`
	// Headers must all be present with exactly these values; names are
	// lower case.
	Headers []NameValue `json:"headers,omitempty"`
	// Query parameters must all be present with exactly these values.
	Query []NameValue `json:"query,omitempty"`
}

// NameValue is a header or query parameter.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Filter types.
const (
	FilterRequestHeaderModifier = "RequestHeaderModifier"
	FilterRequestRedirect       = "RequestRedirect"
	FilterURLRewrite            = "URLRewrite"
)

// Path modifier types.
const (
	ReplaceFullPath    = "ReplaceFullPath"
	ReplacePrefixMatch = "ReplacePrefixMatch"
)

// Filter is one supported HTTPRouteFilter.
type Filter struct {
	Type string `json:"type"`
	// RequestHeaderModifier.
	Set    []NameValue `json:"set,omitempty"`
	Add    []NameValue `json:"add,omitempty"`
	Remove []string    `json:"remove,omitempty"`
	// RequestRedirect and URLRewrite: "" means unchanged.
	Scheme     string `json:"scheme,omitempty"`
	Hostname   string `json:"hostname,omitempty"`
	Port       int32  `json:"port,omitempty"`
	StatusCode int    `json:"statusCode,omitempty"`
	// PathType is ReplaceFullPath or ReplacePrefixMatch ("" leaves the path).
	PathType  string `json:"pathType,omitempty"`
	PathValue string `json:"pathValue,omitempty"`
}

// Backend is one backendRef, resolved.
type Backend struct {
	// Name is "namespace/service:port", for logs.
	Name   string `json:"name"`
	Weight int32  `json:"weight"`
	// Endpoints are the ready endpoint addresses ("ip:port").
	Endpoints []string `json:"endpoints,omitempty"`
	// Protocol is how the gateway speaks to the endpoints: "" HTTP/1.1,
	// ProtocolH2C HTTP/2 without TLS (a GRPCRoute's backends, and Service
	// ports with appProtocol kubernetes.io/h2c).
	Protocol string `json:"protocol,omitempty"`
	// Error, when set, is why the reference did not resolve: requests
	// sent to this backend are answered 500.
	Error string `json:"error,omitempty"`
}

// ProtocolH2C is Backend.Protocol for HTTP/2 without TLS (h2c with prior
// knowledge).
const ProtocolH2C = "h2c"

// RuleID is the route id of rule of HTTPRoute namespace/name: the
// rule's name (section) or, for an unnamed rule, its index. Ids are
// "<namespace>_<name>_<section>" or "<namespace>_<name>__<index>" ('_'
// occurs in none of the parts), shortened with a hash suffix when longer than
// v1alpha1.MaxIdentifierLength.
func RuleID(namespace, name, section string, index int) string {
	return ruleID("", namespace, name, section, index)
}

// GRPCRuleID is the route id of rule of GRPCRoute namespace/name:
// "grpc_" and then what RuleID says, so that an HTTPRoute and a GRPCRoute
// of one name never share an id (an HTTPRoute's has three parts between
// '_', or four with an empty third; a GRPCRoute's four with a third that is
// not empty, or five).
func GRPCRuleID(namespace, name, section string, index int) string {
	return ruleID("grpc_", namespace, name, section, index)
}

func ruleID(prefix, namespace, name, section string, index int) string {
	id := prefix + namespace + "_" + name + "_"
	if section != "" {
		id += section
	} else {
		id += "_" + strconv.Itoa(index)
	}
	if len(id) <= v1alpha1.MaxIdentifierLength {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return strings.TrimRight(id[:v1alpha1.MaxIdentifierLength-13], "._-") + "-" + hex.EncodeToString(sum[:])[:12]
}

// Encode returns the table's JSON and its checksum.
func (t *Table) Encode() ([]byte, string, error) {
	t.Format = Format
	b, err := json.Marshal(t)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// ConfigMap returns the table as the ConfigMap namespace/name.
func (t *Table) ConfigMap(namespace, name string) (*corev1.ConfigMap, error) {
	raw, sum, err := t.Encode()
	if err != nil {
		return nil, err
	}
	data, err := gzipped.Compress(raw, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxCompressedBytes {
		return nil, fmt.Errorf("%w: %d compressed bytes for %d rules, at most %d", ErrTooLarge, len(data), len(t.Rules), MaxCompressedBytes)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: Labels(name),
			Annotations: map[string]string{
				AnnotationChecksum: sum,
				AnnotationRules:    strconv.Itoa(len(t.Rules)),
			},
		},
		BinaryData: map[string][]byte{DataKey: data},
	}, nil
}

// FromConfigMap decodes and validates a route table ConfigMap.
func FromConfigMap(cm *corev1.ConfigMap) (*Table, error) {
	data, ok := cm.BinaryData[DataKey]
	if !ok {
		return nil, fmt.Errorf("binaryData key %s missing", DataKey)
	}
	raw, err := gzipped.Decompress(data, MaxDecodedBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	if want := cm.Annotations[AnnotationChecksum]; want != "" {
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); got != want {
			return nil, fmt.Errorf("checksum %s does not match annotation %s", got, want)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var t Table
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", DataKey, err)
	}
	if t.Format != Format {
		return nil, fmt.Errorf("format %d, this gateway reads format %d", t.Format, Format)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate checks what the data plane relies on.
func (t *Table) Validate() error {
	for i, l := range t.TLS {
		for j, ref := range l.Certificates {
			if ns, name, ok := strings.Cut(ref, "/"); !ok || ns == "" || name == "" || strings.Contains(ns, ".") {
				return fmt.Errorf("tls[%d].certificates[%d]: %q is not namespace/name", i, j, ref)
			}
		}
	}
	for i := range t.Rules {
		r := &t.Rules[i]
		if !v1alpha1.ValidIdentifier(r.ID) {
			return fmt.Errorf("rules[%d]: id %q is not a valid route id", i, r.ID)
		}
		if len(r.Matches) == 0 {
			return fmt.Errorf("rules[%d] (%s): no matches", i, r.ID)
		}
		for j := range r.Matches {
			if err := r.Matches[j].validate(r.GRPC); err != nil {
				return fmt.Errorf("rules[%d].matches[%d]: %w", i, j, err)
			}
		}
		for j, b := range r.Backends {
			if b.Weight < 0 {
				return fmt.Errorf("rules[%d].backends[%d]: negative weight", i, j)
			}
			if b.Protocol != "" && b.Protocol != ProtocolH2C {
				return fmt.Errorf("rules[%d].backends[%d]: protocol %q", i, j, b.Protocol)
			}
		}
		for j, f := range r.Filters {
			switch f.Type {
			case FilterRequestHeaderModifier, FilterRequestRedirect, FilterURLRewrite:
			default:
				return fmt.Errorf("rules[%d].filters[%d]: unsupported type %q", i, j, f.Type)
			}
			if f.PathType != "" && f.PathType != ReplaceFullPath && f.PathType != ReplacePrefixMatch {
				return fmt.Errorf("rules[%d].filters[%d]: path modifier %q", i, j, f.PathType)
			}
		}
	}
	return nil
}

// validate checks a match of an HTTPRoute rule, or with grpc of a
// GRPCRoute rule.
func (m *Match) validate(grpc bool) error {
	if grpc {
		switch {
		case m.PathType != "" || m.PathValue != "" || m.Method != "" || len(m.Query) > 0:
			return errors.New("a GRPCRoute match with a path, method or query")
		case strings.Contains(m.GRPCService, "/") || strings.Contains(m.GRPCMethod, "/"):
			return fmt.Errorf("gRPC service %q or method %q with a '/'", m.GRPCService, m.GRPCMethod)
		}
		return nil
	}
	switch {
	case m.GRPCService != "" || m.GRPCMethod != "":
		return errors.New("an HTTPRoute match with a gRPC service or method")
	case m.PathType != PathExact && m.PathType != PathPrefix:
		return fmt.Errorf("path type %q", m.PathType)
	case !strings.HasPrefix(m.PathValue, "/"):
		return fmt.Errorf("path %q does not start with /", m.PathValue)
	}
	return nil
}
