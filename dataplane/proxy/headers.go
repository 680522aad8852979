package proxy

import (
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limitheaders"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Header names of package limitheaders (shared with the Envoy path), in Go's
// canonical form so they can index an http.Header directly.
var (
	headerLimit      = http.CanonicalHeaderKey(limitheaders.Limit)
	headerRemaining  = http.CanonicalHeaderKey(limitheaders.Remaining)
	headerRetryAfter = http.CanonicalHeaderKey(limitheaders.RetryAfter)
	headerIETF       = http.CanonicalHeaderKey(limitheaders.IETF)
	headerIETFPolicy = http.CanonicalHeaderKey(limitheaders.IETFPolicy)
	headerShadow     = http.CanonicalHeaderKey(limitheaders.Shadow)
)

// DefaultTenantHeader is the request header in which an upstream learns the
// tenant of a forwarded request, unless Options.TenantHeader names another.
const DefaultTenantHeader = "X-Tollgate-Tenant"

// CheckTenantHeader checks a name for Options.TenantHeader: a valid header
// field name that is neither the API key header (never forwarded) nor a
// header HTTP or the reverse proxy manages themselves.
func CheckTenantHeader(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q is not a valid header name", name)
	}
	switch c := http.CanonicalHeaderKey(name); c {
	case http.CanonicalHeaderKey(identity.HeaderName):
		return fmt.Errorf("%q is the API key header, which is never forwarded", name)
	case "Host", "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Content-Type", "Accept-Encoding",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Cookie", "Authorization":
		return fmt.Errorf("%q is a header HTTP or the proxy sets itself", name)
	}
	return nil
}

// ownHeaders are set by the gateway; the same headers from an upstream are
// dropped so a response never carries two answers.
var ownHeaders = []string{headerLimit, headerRemaining, headerIETF, headerIETFPolicy, headerShadow}

// setLimitHeaders writes the limit headers of decision d under rule.
// X-RateLimit-Limit is the capacity this gateway enforces (the rule's, or its
// region's share), also during a Redis outage (when the local bucket holds a
// part of it); X-RateLimit-Remaining is what the deciding bucket has left, 0
// for a rejected request. For a rule with a calendar quota both describe the
// limit that binds: the quota's limit and remaining when it has fewer tokens
// left than the bucket (or refused the request).
//
// With ietf, it adds the IETF draft headers (draft-ietf-httpapi-ratelimit-
// headers), describing the token bucket as a quota q that refills over a
// window w (the seconds a full refill takes), with r remaining and t seconds
// until the bucket is full again, and a second item for a calendar quota:
//
//	RateLimit-Policy: "create-order";q=200;w=2, "create-order-monthly";q=1000000;w=2592000
//	RateLimit: "create-order";r=150;t=1, "create-order-monthly";r=999850;t=1728000
//
// The values are formatted by package limitheaders, shared with the Envoy
// rate limit service.
func setLimitHeaders(h http.Header, route string, rule *snapshot.Rule, d decision.Decision, ietf bool) {
	h[headerLimit] = []string{strconv.FormatInt(limitheaders.LimitOf(d), 10)}
	h[headerRemaining] = []string{strconv.FormatInt(limitheaders.RemainingOf(d), 10)}
	if ietf {
		items := limitheaders.Items(route, rule, d)
		h[headerIETFPolicy] = []string{limitheaders.FormatPolicy(items)}
		h[headerIETF] = []string{limitheaders.FormatState(items)}
	}
}

// setRetryAfter writes Retry-After for a rejected decision: the seconds until
// enough tokens exist, rounded up, at least 1. A request that can never pass
// (cost above capacity) gets none.
func setRetryAfter(h http.Header, d decision.Decision) {
	if s, ok := limitheaders.RetryAfterSeconds(d); ok {
		h[headerRetryAfter] = []string{strconv.FormatInt(s, 10)}
	}
}
