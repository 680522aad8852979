// Package limitheaders formats the rate limit response headers. The HTTP
// proxy (dataplane/proxy) and the Envoy rate limit service (dataplane/rls)
// both use it, so a client sees the same headers whichever path limited it.
package limitheaders

import (
	"math"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Header names as they are usually written. (net/http canonicalizes them to
// X-Ratelimit-Limit etc.; HTTP header names are case-insensitive.)
const (
	Limit      = "X-RateLimit-Limit"
	Remaining  = "X-RateLimit-Remaining"
	RetryAfter = "Retry-After"
	IETF       = "RateLimit"
	IETFPolicy = "RateLimit-Policy"
	Shadow     = "X-RateLimit-Shadow"

	// WouldReject is the value of the Shadow header on a request a Shadow
	// rule would have rejected.
	WouldReject = "would-reject"
)

// RemainingOf is the remaining count a response reports for decision d: what
// the deciding bucket has left, 0 for a rejected request.
func RemainingOf(d decision.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	return d.Remaining
}

// RetryAfterSeconds is the Retry-After of a rejected decision: the seconds
// until enough tokens exist, rounded up, at least 1. ok is false when the
// request can never pass (its cost exceeds the capacity): send no
// Retry-After then.
func RetryAfterSeconds(d decision.Decision) (seconds int64, ok bool) {
	if d.RetryAfter < 0 {
		return 0, false
	}
	return max(1, CeilSeconds(d.RetryAfter)), true
}

// Policy is one item of the IETF RateLimit-Policy header
// (draft-ietf-httpapi-ratelimit-headers), describing the token bucket as a
// quota q (the capacity enforced, d.Limit) that refills over a window w (the
// seconds a full refill of the rule takes):
//
//	"create-order";q=200;w=2
func Policy(name string, rule *snapshot.Rule, d decision.Decision) string {
	window := int64(math.Ceil(float64(rule.Capacity) / rule.RatePerSecond()))
	return `"` + name + `";q=` + strconv.FormatInt(d.Limit, 10) + ";w=" + strconv.FormatInt(window, 10)
}

// State is one item of the IETF RateLimit header: r remaining (RemainingOf)
// and t seconds until the bucket is full again:
//
//	"create-order";r=150;t=1
func State(name string, d decision.Decision) string {
	return `"` + name + `";r=` + strconv.FormatInt(RemainingOf(d), 10) + ";t=" + strconv.FormatInt(CeilSeconds(d.ResetAfter), 10)
}

// CeilSeconds is d in whole seconds, rounded up.
func CeilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// ConcurrencyUnit is the IETF quota unit of a concurrency limit.
const ConcurrencyUnit = "concurrent-requests"

// ConcurrencyName is the name of a concurrency limit's items in the IETF
// headers: the route's name with "-concurrency" appended, so it never
// equals the token bucket's item.
func ConcurrencyName(name string) string { return name + "-concurrency" }

// ConcurrencyPolicy is the RateLimit-Policy item of a concurrency limit of
// limit requests in flight: a quota in the unit concurrent-requests, with
// no window (a slot comes back when a request ends, not over time):
//
//	"create-order-concurrency";q=5;qu="concurrent-requests"
func ConcurrencyPolicy(name string, limit int64) string {
	return `"` + ConcurrencyName(name) + `";q=` + strconv.FormatInt(limit, 10) + `;qu="` + ConcurrencyUnit + `"`
}

// ConcurrencyState is the RateLimit item of a concurrency limit: r slots
// remaining (0 for a rejected request). It carries no t: when a slot comes
// back depends on other requests ending.
//
//	"create-order-concurrency";r=2
func ConcurrencyState(name string, remaining int64) string {
	return `"` + ConcurrencyName(name) + `";r=` + strconv.FormatInt(max(0, remaining), 10)
}

// AppendItem adds item to a structured field list value (RateLimit-Policy,
// RateLimit): "a" and "b" make "a, b".
func AppendItem(list, item string) string {
	if list == "" {
		return item
	}
	return list + ", " + item
}
