// Package limitheaders formats the rate limit response headers. The HTTP
// proxy (dataplane/proxy) and the Envoy rate limit service (dataplane/rls)
// both use it, so a client sees the same headers whichever path limited it.
package limitheaders

import (
	"math"
	"strconv"
	"strings"
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
// the deciding bucket has left, or the calendar quota if it has less, 0 for
// a rejected request.
func RemainingOf(d decision.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	if d.Quota.Set {
		return min(d.Remaining, d.Quota.Remaining)
	}
	return d.Remaining
}

// LimitOf is the limit a response reports next to RemainingOf: the
// bucket's capacity, or the quota's limit when the quota is what binds (it
// has fewer tokens left, or it refused the request).
func LimitOf(d decision.Decision) int64 {
	if QuotaBinds(d) {
		return d.QuotaLimit
	}
	return d.Limit
}

// QuotaBinds reports whether d's calendar quota constrains the request more
// than its bucket does: it refused the request, or it has fewer tokens left.
func QuotaBinds(d decision.Decision) bool {
	if !d.Quota.Set || d.QuotaLimit == 0 {
		return false
	}
	if !d.Allowed {
		return d.Quota.Refused
	}
	return d.Quota.Remaining < d.Remaining
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

// Item is one policy of the IETF headers: its name, quota q over a window
// of w seconds, and its state, r remaining and t seconds until reset. A
// response carries one item per limit that applied (a token bucket, a
// calendar quota, ...), in both headers, in the same order.
type Item struct {
	Name             string
	Quota, Window    int64
	Remaining, Reset int64
}

// Items are the IETF items of decision d under rule, for the limit named
// name (the route): the token bucket's (Policy, State), then, for a rule
// with a calendar quota, the quota's, named "<name>-daily", "-weekly" or
// "-monthly", with w the period's nominal length (86400, 604800, 2592000
// seconds: 30 days for a month) and t the seconds to the end of the
// period. Each item's r is what that limit has left (0 for the one that
// rejected the request).
func Items(name string, rule *snapshot.Rule, d decision.Decision) []Item {
	bucketLeft := d.Remaining
	if !d.Allowed && !d.Quota.Refused {
		bucketLeft = 0
	}
	items := []Item{{
		Name: name, Quota: d.Limit, Window: bucketWindow(rule),
		Remaining: max(0, bucketLeft), Reset: CeilSeconds(d.ResetAfter),
	}}
	if !d.Quota.Set || !rule.HasQuota() {
		return items
	}
	quotaLeft := d.Quota.Remaining
	if d.Quota.Refused {
		quotaLeft = 0
	}
	return append(items, Item{
		Name: name + "-" + rule.QuotaPeriod.Adjective(), Quota: d.QuotaLimit, Window: nominalSeconds[rule.QuotaPeriod],
		Remaining: max(0, quotaLeft), Reset: CeilSeconds(d.Quota.ResetAfter),
	})
}

// nominalSeconds is the w of a quota period.
var nominalSeconds = map[snapshot.QuotaPeriod]int64{
	snapshot.QuotaDay: 86400, snapshot.QuotaWeek: 7 * 86400, snapshot.QuotaMonth: 30 * 86400,
}

// FormatPolicy is the value of the RateLimit-Policy header for items:
//
//	"create-order";q=200;w=2, "create-order-monthly";q=1000000;w=2592000
func FormatPolicy(items []Item) string {
	return formatItems(items, ";q=", ";w=", func(it *Item) (int64, int64) { return it.Quota, it.Window })
}

// FormatState is the value of the RateLimit header for items:
//
//	"create-order";r=150;t=1, "create-order-monthly";r=999850;t=1728000
func FormatState(items []Item) string {
	return formatItems(items, ";r=", ";t=", func(it *Item) (int64, int64) { return it.Remaining, it.Reset })
}

// formatItems writes items as a list of "name";<p1><v1><p2><v2>, the two
// values being params of the item.
func formatItems(items []Item, p1, p2 string, params func(*Item) (int64, int64)) string {
	var b strings.Builder
	for i := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		v1, v2 := params(&items[i])
		b.WriteString(`"` + items[i].Name + `"` + p1 + strconv.FormatInt(v1, 10) + p2 + strconv.FormatInt(v2, 10))
	}
	return b.String()
}

// bucketWindow is the seconds a full refill of rule's bucket takes.
func bucketWindow(rule *snapshot.Rule) int64 {
	return int64(math.Ceil(float64(rule.Capacity) / rule.RatePerSecond()))
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
