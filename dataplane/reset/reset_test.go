package reset

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		name  string
		total float64
		caps  []float64
		whole bool
		want  []float64
	}{
		{"even", 8, []float64{3, 3, 3, 3}, false, []float64{2, 2, 2, 2}},
		{"parts differ by one", 7, []float64{3, 3, 3, 3}, false, []float64{2, 2, 2, 1}},
		{"a fraction goes to the first", 3.5, []float64{2, 2}, false, []float64{2, 1.5}},
		{"more than all hold: each full", 7.5, []float64{3, 3}, false, []float64{3, 3}},
		{"clamped at fractional capacities, the rest spilled", 10, []float64{2.5, 2.5, 2.5, 2.5}, false, []float64{2.5, 2.5, 2.5, 2.5}},
		{"spill to a shard with room", 9, []float64{1, 10}, false, []float64{1, 8}},
		{"whole quota parts", 5, []float64{2, 2, 2}, true, []float64{2, 2, 1}},
		{"whole spill stays whole", 5, []float64{1, 1, 5}, true, []float64{1, 1, 3}},
		{"zero", 0, []float64{3, 3}, false, []float64{0, 0}},
	}
	for _, c := range cases {
		got := split(c.total, c.caps, c.whole)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: split(%v, %v) = %v, want %v", c.name, c.total, c.caps, got, c.want)
		}
	}
}

// TestResetLayouts: a bucket still in tollgate 0.1's form (a hash of its
// own) is set too: with the packed layout the old form is removed, with
// compat-0.1 both forms hold the new count, and full leaves nothing stored.
func TestResetLayouts(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	rule := &snapshot.Rule{Tenant: "t", Route: "r", Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3_600_000, Source: "ns/r"}
	e := decision.New(decision.Options{Rules: fixed{rule}, Limiter: limiter.NewLocal(limiter.LocalOptions{})})
	plan := e.Plan("t", "r")
	legacy := func(tokens int) {
		t.Helper()
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, "rl:{t}:r", "tokens", tokens, "ts", now.UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	three := int64(3)
	for _, layout := range []limiter.Layout{limiter.LayoutPacked, limiter.LayoutCompat} {
		legacy(1)
		res, err := Do(ctx, c, plan, Request{Part: PartBucket, Tokens: &three}, layout)
		if err != nil {
			t.Fatal(err)
		}
		if res.Before < 1 || res.Before > 1.01 || res.After != 3 {
			t.Errorf("layout %d: before %v after %v, want about 1 and 3 (the 0.1 form was read)", layout, res.Before, res.After)
		}
		st, err := limiter.Peek(ctx, c, "rl:{t}:r")
		if err != nil || !st.Found || st.Tokens != 3 {
			t.Errorf("layout %d: packed state %+v %v", layout, st, err)
		}
		old, _ := c.HGet(ctx, "rl:{t}:r", "tokens").Result()
		if want := map[limiter.Layout]string{limiter.LayoutPacked: "", limiter.LayoutCompat: "3"}[layout]; old != want {
			t.Errorf("layout %d: the 0.1 form holds %q, want %q", layout, old, want)
		}
		if ttl := c.PTTL(ctx, "rl:{t}").Val(); ttl < time.Hour {
			t.Errorf("layout %d: the hash expires in %v, want at least twice the refill time", layout, ttl)
		}
		if _, err := Do(ctx, c, plan, Request{Part: PartBucket}, layout); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, "rl:{t}:r").Val(); n != 0 {
			t.Errorf("layout %d: full left the 0.1 form", layout)
		}
		if st, _ := limiter.Peek(ctx, c, "rl:{t}:r"); st.Found {
			t.Errorf("layout %d: full left %+v stored", layout, st)
		}
	}
	if err := Validate(plan, Request{Part: PartBucket, Tokens: ptr(11)}); err == nil || err.Error() != "tokens: 11 is more than the capacity 10 of the rule in force (ns/r)" {
		t.Errorf("Validate above the capacity: %v", err)
	}
	if err := Validate(plan, Request{Part: "all"}); err == nil {
		t.Error("Validate accepted part all")
	}
}

type fixed struct{ r *snapshot.Rule }

func (f fixed) Lookup(string, string) *snapshot.Rule { return f.r }

func (f fixed) Extra(_, _ string, _ snapshot.Claims, dst []*snapshot.Rule) []*snapshot.Rule {
	return dst
}

func (f fixed) LookupClaims(string, string, snapshot.Claims) *snapshot.Rule { return f.r }

func ptr(n int64) *int64 { return &n }
