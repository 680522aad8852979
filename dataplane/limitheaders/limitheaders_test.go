package limitheaders

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestItemsWithAQuota: a rule with a calendar quota gives two IETF items;
// X-RateLimit-Limit/-Remaining follow the limit that binds; the limit that
// refused a request reports r=0, the other its real remaining.
func TestItemsWithAQuota(t *testing.T) {
	rule := &snapshot.Rule{Capacity: 200, RefillTokens: 100, RefillPeriodMs: 1000, QuotaLimit: 1_000_000, QuotaPeriod: snapshot.QuotaMonth, QuotaZone: "UTC"}
	quota := func(left int64, refused bool) limiter.QuotaOutcome {
		return limiter.QuotaOutcome{Set: true, Remaining: left, ResetAfter: 20 * 24 * time.Hour, Refused: refused}
	}
	cases := []struct {
		name          string
		d             decision.Decision
		state         string
		limit, remain int64
	}{
		{"bucket binds", decision.Decision{Outcome: limiter.Outcome{Allowed: true, Remaining: 150, ResetAfter: time.Second, Quota: quota(999_850, false)}, Limit: 200, QuotaLimit: 1_000_000},
			`"orders";r=150;t=1, "orders-monthly";r=999850;t=1728000`, 200, 150},
		{"quota binds", decision.Decision{Outcome: limiter.Outcome{Allowed: true, Remaining: 150, ResetAfter: time.Second, Quota: quota(7, false)}, Limit: 200, QuotaLimit: 1_000_000},
			`"orders";r=150;t=1, "orders-monthly";r=7;t=1728000`, 1_000_000, 7},
		{"quota refused", decision.Decision{Outcome: limiter.Outcome{Remaining: 150, RetryAfter: time.Hour, ResetAfter: time.Second, Quota: quota(0, true)}, Limit: 200, QuotaLimit: 1_000_000},
			`"orders";r=150;t=1, "orders-monthly";r=0;t=1728000`, 1_000_000, 0},
		{"bucket refused", decision.Decision{Outcome: limiter.Outcome{Remaining: 0, RetryAfter: time.Second, ResetAfter: 2 * time.Second, Quota: quota(5, false)}, Limit: 200, QuotaLimit: 1_000_000},
			`"orders";r=0;t=2, "orders-monthly";r=5;t=1728000`, 200, 0},
		{"fail open: no quota state", decision.Decision{Outcome: limiter.Outcome{Allowed: true, Remaining: 200}, Limit: 200, QuotaLimit: 1_000_000},
			`"orders";r=200;t=0`, 200, 200},
	}
	for _, c := range cases {
		items := Items("orders", rule, c.d)
		if got := FormatState(items); got != c.state {
			t.Errorf("%s: RateLimit %q, want %q", c.name, got, c.state)
		}
		if got := LimitOf(c.d); got != c.limit {
			t.Errorf("%s: limit %d, want %d", c.name, got, c.limit)
		}
		if got := RemainingOf(c.d); got != c.remain {
			t.Errorf("%s: remaining %d, want %d", c.name, got, c.remain)
		}
	}
	items := Items("orders", rule, cases[0].d)
	if got, want := FormatPolicy(items), `"orders";q=200;w=2, "orders-monthly";q=1000000;w=2592000`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	// Another limit (a concurrency cap, say) adds its item to the list.
	items = append(items, Item{Name: "orders-concurrency", Quota: 5, Window: 1, Remaining: 4})
	if got, want := FormatState(items), `"orders";r=150;t=1, "orders-monthly";r=999850;t=1728000, "orders-concurrency";r=4;t=0`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}
