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
