package v1alpha1

// KeyPart is one part of the key of a rule's buckets (spec.by): exactly
// one of its fields is set. The parts are combined in the order written;
// two requests share a bucket when every part has the same value for
// both.
//
// +kubebuilder:validation:XValidation:rule="(has(self.tenant) ? 1 : 0) + (has(self.route) ? 1 : 0) + (has(self.clientAddress) ? 1 : 0) + (has(self.header) ? 1 : 0) + (has(self.method) ? 1 : 0) + (has(self.path) ? 1 : 0) + (has(self.claim) ? 1 : 0) == 1",message="spec.by: each item sets exactly one of tenant, route, clientAddress, header, method, path and claim"
type KeyPart struct {
	// tenant keys the bucket by the request's tenant. A request without
	// an identity (a route with identity optional or none) has no tenant:
	// a rule keyed by tenant does not apply to it.
	// +optional
	Tenant *KeyTenant `json:"tenant,omitempty"`

	// route keys the bucket by the route id the request matched.
	// +optional
	Route *KeyRoute `json:"route,omitempty"`

	// clientAddress keys the bucket by the client's address (the TCP peer,
	// or behind --trusted-proxies the first untrusted X-Forwarded-For
	// hop) masked to a prefix: every address of one /64 of IPv6 shares a
	// bucket by default.
	// +optional
	ClientAddress *KeyClientAddress `json:"clientAddress,omitempty"`

	// header keys the bucket by the value of a request header. A request
	// without the header shares one bucket with every other request
	// without it (leaving it out evades nothing); a value over 256 bytes,
	// with control characters, or sent twice is answered 400 naming the
	// header. Over Envoy the header comes from a descriptor entry the
	// domains file maps to it.
	// +optional
	Header *KeyHeader `json:"header,omitempty"`

	// method keys the bucket by the request method (GET, POST, ...).
	// +optional
	Method *KeyMethod `json:"method,omitempty"`

	// path keys the bucket by the first segments of the request path
	// (without the query): segments 2 makes /v1/orders/42 and
	// /v1/orders/43 share the bucket of /v1/orders.
	// +optional
	Path *KeyPath `json:"path,omitempty"`

	// claim keys the bucket by a claim of the request's verified bearer
	// token (a string, number or boolean). A request without the claim
	// (or without a token) shares one bucket with every other request
	// without it.
	// +optional
	Claim *KeyClaim `json:"claim,omitempty"`
}

// KeyTenant is the tenant part of a key; it has no settings.
type KeyTenant struct{}

// KeyRoute is the route part of a key; it has no settings.
type KeyRoute struct{}

// KeyMethod is the method part of a key; it has no settings.
type KeyMethod struct{}

// KeyClientAddress is the client address part of a key.
type KeyClientAddress struct {
	// ipv4Prefix is the prefix length an IPv4 address is masked to: 32
	// (the default) is one address, 24 its /24. 8 to 32.
	// +kubebuilder:validation:Minimum=8
	// +kubebuilder:validation:Maximum=32
	// +kubebuilder:default=32
	// +optional
	IPv4Prefix int32 `json:"ipv4Prefix,omitempty"`

	// ipv6Prefix is the prefix length an IPv6 address is masked to: 64
	// (the default) is one subnet, which is what one client usually
	// holds. 16 to 128.
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=128
	// +kubebuilder:default=64
	// +optional
	IPv6Prefix int32 `json:"ipv6Prefix,omitempty"`
}

// KeyHeader is the request header part of a key.
type KeyHeader struct {
	// name is the header's name (case does not matter). 1 to 64
	// characters of a header field name. The API key header and
	// Authorization are refused: a credential is never a bucket key (use
	// tenant or claim).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:XValidation:rule="!(self.lowerAscii() in ['x-api-key', 'authorization', 'cookie'])",message="spec.by.header.name: a credential header (X-Api-Key, Authorization, Cookie) cannot key a bucket; key by tenant or claim"
	// +required
	Name string `json:"name"`
}

// KeyPath is the request path part of a key.
type KeyPath struct {
	// segments is the number of leading path segments that make the
	// key: 1 keys /v1/orders/42 as /v1. 1 to 16; default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=1
	// +optional
	Segments int32 `json:"segments,omitempty"`
}

// KeyClaim is the verified claim part of a key.
type KeyClaim struct {
	// path is the claim's path, as in spec.match.claims (org.id is the
	// claim id inside the object claim org).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('.') && !self.endsWith('.') && !self.contains('..') && !self.matches('[[:cntrl:]]')",message="spec.by.claim.path is 1 to 256 bytes of names separated by single dots, without control characters"
	// +required
	Path string `json:"path"`
}

// Bounds of spec.by; the schema enforces the same.
const (
	// MaxKeyParts is the most items of spec.by.
	MaxKeyParts = 8
	// MaxPathSegments is the most segments of a path key part.
	MaxPathSegments = 16
	// MaxKeyValueLength is the longest header value (in bytes) that keys a
	// bucket.
	MaxKeyValueLength = 256
	// DefaultIPv4Prefix and DefaultIPv6Prefix are a clientAddress part's
	// prefix lengths unless it sets its own.
	DefaultIPv4Prefix = 32
	DefaultIPv6Prefix = 64
)
