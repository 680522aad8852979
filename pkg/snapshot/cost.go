package snapshot

import (
	"fmt"
	"regexp"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// Cost is the compiled spec.cost: what a request of the rule costs before
// it is forwarded, and what its response charges after. Nil: one token.
type Cost struct {
	// Fixed is the cost of every request (0: see Header; neither: 1).
	Fixed int64 `json:"f,omitempty"`
	// Header names the request header that carries the cost.
	Header string `json:"h,omitempty"`
	// Default is the cost of a request without Header (0: 1).
	Default int64 `json:"d,omitempty"`
	// Max is the largest cost Header may give (0: MaxCost).
	Max int64 `json:"m,omitempty"`
	// Response, when set, charges what the upstream reports.
	Response *ResponseCost `json:"r,omitempty"`
}

// ResponseCost is the compiled spec.cost.response.
type ResponseCost struct {
	// Header names the response header that carries the cost; JSONField
	// the path (keys joined by dots) of a number in a JSON or
	// text/event-stream body. Exactly one is set.
	Header    string `json:"h,omitempty"`
	JSONField string `json:"j,omitempty"`
	// Default is charged when a response reports no usable cost.
	Default int64 `json:"d,omitempty"`
	// OnError is charged when the upstream fails.
	OnError int64 `json:"e,omitempty"`
	// OnClientGone, when set, is charged when the client went away before
	// the cost came and the gateway could not find it on its own; nil:
	// Default (ClientGone). A pointer so that 0 can be set and a rule
	// compiled before the field existed means Default.
	OnClientGone *int64 `json:"g,omitempty"`
	// Max bounds one response's charge (0: MaxCost).
	Max int64 `json:"m,omitempty"`
	// MaxDebt is how far below zero charges may drive the bucket.
	MaxDebt int64 `json:"x,omitempty"`
}

// MaxCost bounds every cost; it matches the CRD schema.
const MaxCost = 1_000_000_000

var (
	costHeaderPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)
	jsonFieldPattern  = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,15}$`)
)

// RequestMax is the largest cost the request header may give.
func (c *Cost) RequestMax() int64 {
	if c.Max == 0 {
		return MaxCost
	}
	return c.Max
}

// RequestDefault is the cost of a request without the cost header (or of
// every request, for a rule with neither Fixed nor Header).
func (c *Cost) RequestDefault() int64 {
	switch {
	case c.Fixed > 0:
		return c.Fixed
	case c.Default > 0:
		return c.Default
	}
	return 1
}

// Bound is the largest charge of one response.
func (r *ResponseCost) Bound() int64 {
	if r.Max == 0 {
		return MaxCost
	}
	return r.Max
}

// ClientGone is what a response costs whose client went away before its
// cost came (OnClientGone, else Default).
func (r *ResponseCost) ClientGone() int64 {
	if r.OnClientGone == nil {
		return r.Default
	}
	return *r.OnClientGone
}

func inCost(v, lo int64) bool { return v >= lo && v <= MaxCost }

// validateCost checks the cost of a rule read from an untrusted source.
func (r *Rule) validateCost() error {
	c := r.Cost
	if c == nil {
		return nil
	}
	name := r.Tenant + "/" + r.Route
	switch {
	case (c.Fixed != 0) == (c.Header != ""):
		return fmt.Errorf("rule %s: cost: set exactly one of fixed and header", name)
	case c.Fixed != 0 && (!inCost(c.Fixed, 1) || c.Fixed > r.Capacity):
		return fmt.Errorf("rule %s: cost fixed %d out of range [1, capacity %d]", name, c.Fixed, r.Capacity)
	case c.Header != "" && (len(c.Header) > 64 || !costHeaderPattern.MatchString(c.Header)):
		return fmt.Errorf("rule %s: cost header %q is not a valid header name", name, clip.String(c.Header))
	case c.Default != 0 && (c.Header == "" || !inCost(c.Default, 1) || c.Default > c.RequestMax()):
		return fmt.Errorf("rule %s: cost default %d needs a header and must be in [1, max %d]", name, c.Default, c.RequestMax())
	case c.Max != 0 && (c.Header == "" || !inCost(c.Max, 1)):
		return fmt.Errorf("rule %s: cost max %d needs a header and must be in [1, %d]", name, c.Max, MaxCost)
	}
	return r.validateResponseCost(name)
}

func (r *Rule) validateResponseCost(name string) error {
	rc := r.Cost.Response
	if rc == nil {
		return nil
	}
	switch {
	case (rc.Header == "") == (rc.JSONField == ""):
		return fmt.Errorf("rule %s: response cost: set exactly one of header and jsonField", name)
	case rc.Header != "" && (len(rc.Header) > 64 || !costHeaderPattern.MatchString(rc.Header)):
		return fmt.Errorf("rule %s: response cost header %q is not a valid header name", name, clip.String(rc.Header))
	case rc.JSONField != "" && (len(rc.JSONField) > 128 || !jsonFieldPattern.MatchString(rc.JSONField)):
		return fmt.Errorf("rule %s: response cost jsonField %q is not a path of 1 to 16 keys", name, clip.String(rc.JSONField))
	case rc.Max != 0 && !inCost(rc.Max, 1):
		return fmt.Errorf("rule %s: response cost max %d out of range [1, %d]", name, rc.Max, MaxCost)
	case !inCost(rc.Default, 0) || rc.Default > rc.Bound() || !inCost(rc.OnError, 0) || rc.OnError > rc.Bound():
		return fmt.Errorf("rule %s: response cost default %d and onError %d must be in [0, max %d]", name, rc.Default, rc.OnError, rc.Bound())
	case !inCost(rc.ClientGone(), 0) || rc.ClientGone() > rc.Bound():
		return fmt.Errorf("rule %s: response cost onClientGone %d must be in [0, max %d]", name, rc.ClientGone(), rc.Bound())
	case !inCost(rc.MaxDebt, 0):
		return fmt.Errorf("rule %s: response cost maxDebt %d out of range [0, %d]", name, rc.MaxDebt, MaxCost)
	case r.Shards > 1 || r.Prefetch != PrefetchOff:
		return fmt.Errorf("rule %s: response cost cannot be combined with prefetch or shards", name)
	}
	return nil
}

// costFromSpec compiles spec.cost; capacity is the rule's (maxDebt's
// default).
func costFromSpec(c *v1alpha1.Cost, capacity int64) *Cost {
	if c == nil {
		return nil
	}
	out := &Cost{}
	if q := c.Request; q != nil {
		out.Fixed, out.Header = deref(q.Fixed, 0), q.Header
		out.Default, out.Max = deref(q.Default, 0), deref(q.Max, 0)
	} else {
		out.Fixed = 1
	}
	if p := c.Response; p != nil {
		out.Response = &ResponseCost{
			Header: p.Header, JSONField: p.JSONField,
			Default: deref(p.Default, 0), OnError: deref(p.OnError, 0), OnClientGone: copyPtr(p.OnClientGone),
			Max: deref(p.Max, 0), MaxDebt: deref(p.MaxDebt, capacity),
		}
	}
	return out
}

func deref(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func copyPtr(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
