package v1alpha1

// Cost gives the requests of a rule a cost other than one token: a cost
// known before forwarding (request), a cost the upstream reports in its
// response (response), or both, which add up. HTTP routes only: the Envoy
// rate limit service takes its cost from hits_addend.
// +kubebuilder:validation:XValidation:rule="has(self.request) || has(self.response)",message="spec.cost needs request or response"
type Cost struct {
	// request is the cost a request takes before it is forwarded: fixed,
	// or read from a request header. Default: one token.
	// +optional
	Request *RequestCost `json:"request,omitempty"`

	// response charges a cost the upstream reports, after it answered:
	// from a response header, or from a numeric field of a JSON body (also
	// the last event of a text/event-stream body that holds it). The
	// request is admitted when the bucket holds its request cost (one
	// token by default: a bucket in debt admits nothing); the response's
	// cost is then charged whatever the bucket holds, down to -maxDebt
	// tokens (a debt the bucket refills from before it admits again).
	// The first byte of the response is not delayed; its end waits for the
	// charge. Cannot be combined with spec.hotKey prefetch or shards.
	// +optional
	Response *ResponseCost `json:"response,omitempty"`
}

// RequestCost is the cost taken before a request is forwarded.
// +kubebuilder:validation:XValidation:rule="has(self.fixed) != has(self.header)",message="spec.cost.request: set exactly one of fixed and header"
// +kubebuilder:validation:XValidation:rule="has(self.header) || (!has(self.default) && !has(self.max))",message="spec.cost.request.default and spec.cost.request.max need spec.cost.request.header"
// +kubebuilder:validation:XValidation:rule="!has(self.default) || !has(self.max) || self.default <= self.max",message="spec.cost.request.default must not exceed spec.cost.request.max"
type RequestCost struct {
	// fixed is the tokens every request takes, 1 to 1000000000, at most
	// spec.capacity.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Fixed *int64 `json:"fixed,omitempty"`

	// header names a request header (for example X-Cost) whose value is the
	// request's cost: a whole number from 1 to max, in decimal digits. A
	// request without the header costs default; one with a malformed value,
	// a value out of range or the header twice is answered 400, with a
	// message naming the header. A cost above the bucket's capacity is
	// answered 429 without Retry-After (it can never pass). 1 to 64
	// characters: letters, digits and '-'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	// +optional
	Header string `json:"header,omitempty"`

	// default is the cost of a request without the header. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Default *int64 `json:"default,omitempty"`

	// max is the largest cost the header may give; a larger value is
	// answered 400. Default 1000000000.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Max *int64 `json:"max,omitempty"`
}

// ResponseCost is the cost an upstream reports in its response.
// +kubebuilder:validation:XValidation:rule="has(self.header) != has(self.jsonField)",message="spec.cost.response: set exactly one of header and jsonField"
// +kubebuilder:validation:XValidation:rule="!has(self.max) || ((!has(self.default) || self.default <= self.max) && (!has(self.onError) || self.onError <= self.max) && (!has(self.onClientGone) || self.onClientGone <= self.max))",message="spec.cost.response.default, onError and onClientGone must not exceed spec.cost.response.max"
type ResponseCost struct {
	// header names a response header (for example X-Usage-Tokens) whose
	// value is the cost. Same form as spec.cost.request.header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9-]*$`
	// +optional
	Header string `json:"header,omitempty"`

	// jsonField is the path of a number in a JSON response body, object
	// keys joined by dots (for example usage.total_tokens). The body is
	// scanned as it streams to the client, never buffered: the last value
	// at the path counts; in a text/event-stream body, the last event whose
	// data holds it. 1 to 16 keys of letters, digits, '_' and '-', at most
	// 128 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,15}$`
	// +optional
	JSONField string `json:"jsonField,omitempty"`

	// default is charged when a response (status below 500) reports no
	// usable cost: the header or field is missing, or not a number, or
	// negative. A fractional value is rounded up. Default 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Default *int64 `json:"default,omitempty"`

	// onError is charged when the upstream fails: a 5xx status (its own, or
	// the gateway's 502/504 when it could not be reached or timed out), or
	// a body that breaks off before the cost came (also while the gateway
	// reads on after the client left, see onClientGone). Default 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	OnError *int64 `json:"onError,omitempty"`

	// onClientGone is charged when the client goes away before the cost
	// came and the gateway cannot find it without the client. A client that
	// leaves after the response headers does not stop the upstream: the
	// gateway reads the rest of the answer on its own, at most the
	// gateway's --response-cost-drain-bytes (1 MiB by default) and the
	// route's timeout after the client left, and charges the cost the
	// answer reports, as if the client had read it all; onClientGone
	// applies when those bounds end the read before the cost came, or when
	// the gateway is already reading --response-cost-max-drains answers so.
	// A client that leaves before the response headers cancels the
	// upstream request and is charged onClientGone too (the upstream may
	// have done the work). So hanging up never costs less than this.
	// Default: default.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	OnClientGone *int64 `json:"onClientGone,omitempty"`

	// max bounds the cost of one response: a larger reported value is
	// charged as max. Default 1000000000 (then only maxDebt bounds it).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Max *int64 `json:"max,omitempty"`

	// maxDebt is how far below zero charges may drive the bucket, in
	// tokens; a charge is cut there. Default: spec.capacity (a tenant waits
	// at most two full refills). During a Redis outage each of N gateways
	// owes at most maxDebt/N. 0 to 1000000000.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	MaxDebt *int64 `json:"maxDebt,omitempty"`
}
