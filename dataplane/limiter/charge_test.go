package limiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// slowBucket does not refill during a test (one token per hour).
func slowBucket(key string, capacity float64) Bucket {
	return Bucket{Key: Key("t", key), Capacity: capacity, RefillTokens: 1, RefillPeriodMs: 3600_000}
}

// near reports whether stored tokens are want plus what a slowBucket
// refills during a test (a token an hour: well under 0.01).
func near(tokens, want float64) bool {
	return tokens >= want && tokens < want+0.01
}

// TestScriptChargeGoesIntoDebt: a charge takes tokens the bucket does not
// hold, down to the floor and no further; a bucket in debt then rejects
// with a wait that counts the debt; stored tokens are exact.
func TestScriptChargeGoesIntoDebt(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := NewRedis(c)
	b := slowBucket("debt", 10)
	if res, err := r.Take(ctx, b, 4, 4); err != nil || res.Granted != 4 {
		t.Fatalf("take 4: %+v %v", res, err)
	}
	cb := b
	cb.Charge, cb.MaxDebt = true, 20
	res, err := r.Take(ctx, cb, 15, 15) // 6 held: 9 of debt
	if err != nil || res.Granted != 15 || res.Remaining != -9 {
		t.Fatalf("charge 15 of 6: %+v %v, want granted 15, remaining -9", res, err)
	}
	st, err := Peek(ctx, c, b.Key)
	if err != nil || !near(st.Tokens, -9) {
		t.Fatalf("stored %+v %v, want -9 tokens", st, err)
	}
	// The floor (-20) cuts the next charge: 11 of 50.
	if res, err = r.Take(ctx, cb, 50, 50); err != nil || res.Granted != 11 || res.Remaining != -20 {
		t.Fatalf("charge 50 at -9 with floor 20: %+v %v, want granted 11, remaining -20", res, err)
	}
	// At the floor a charge takes nothing.
	if res, err = r.Take(ctx, cb, 3, 3); err != nil || res.Granted != 0 || res.Remaining != -20 {
		t.Fatalf("charge at the floor: %+v %v", res, err)
	}
	// An ordinary take is rejected; its wait counts the debt: 21 tokens at
	// one per hour.
	res, err = r.Take(ctx, b, 1, 1)
	if err != nil || res.Granted != 0 {
		t.Fatalf("take in debt: %+v %v, want rejected", res, err)
	}
	if want := int64(21 * 3600_000); res.WaitMs < want-1000 || res.WaitMs > want {
		t.Fatalf("wait in debt %dms, want about %dms (21 tokens)", res.WaitMs, want)
	}
	// The key outlives the refill from the floor to full (30 tokens).
	pttl, err := c.PTTL(ctx, "rl:{t}").Result()
	if err != nil || pttl < 30*time.Hour {
		t.Fatalf("key expires in %v %v, want at least the 30h a refill from -20 to 10 takes", pttl, err)
	}
}

// TestScriptWithoutDebtArgumentIsUnchanged: an ordinary call never drives
// a bucket negative, however large its cost; a charge with floor 0 stops
// at zero.
func TestScriptWithoutDebtArgumentIsUnchanged(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	r := NewRedis(srv.Client(t))
	b := slowBucket("plain", 5)
	if res, err := r.Take(ctx, b, 7, 7); err != nil || res.Granted != 0 || res.Remaining != 5 || res.WaitMs != -1 {
		t.Fatalf("take 7 of 5: %+v %v, want rejected, 5 left, wait -1", res, err)
	}
	cb := b
	cb.Charge = true // MaxDebt 0
	if res, err := r.Take(ctx, cb, 7, 7); err != nil || res.Granted != 5 || res.Remaining != 0 {
		t.Fatalf("charge 7 of 5 with floor 0: %+v %v, want 5 charged, 0 left", res, err)
	}
}

// TestConcurrentChargesAreExact: 400 concurrent charges of 3 tokens from
// four batchers on one bucket of 100 with a floor of 2000: every token is
// charged once (100 - 1200 = -1100), none lost or doubled.
func TestConcurrentChargesAreExact(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	b := slowBucket("many", 100)
	b.Charge, b.MaxDebt = true, 2000
	var takers []Taker
	for range 4 {
		bt := NewBatcher(srv.Client(t), BatcherOptions{Timeout: time.Second})
		t.Cleanup(func() { _ = bt.Close() })
		takers = append(takers, bt)
	}
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := takers[i%4].Take(ctx, b, 3, 3); err != nil || res.Granted != 3 {
				t.Errorf("charge: %+v %v", res, err)
			}
		}()
	}
	wg.Wait()
	st, err := Peek(ctx, srv.Client(t), b.Key)
	if err != nil || !near(st.Tokens, -1100) {
		t.Fatalf("stored %+v %v, want -1100 tokens", st, err)
	}
}

// TestChainChargeFallsBackToLocalDebt: with Redis gone, a LocalFallback
// rule's charge goes to the local bucket (its 1/N share of the debt), which
// then rejects until it refills; FailOpen charges nothing.
func TestChainChargeFallsBackToLocalDebt(t *testing.T) {
	srv := redistest.Start(t)
	ch := NewChain(ChainOptions{Client: srv.Client(t), Replicas: func() int { return 2 }, FailuresToOpen: 1, OpenFor: time.Hour})
	t.Cleanup(func() { _ = ch.Close() })
	ctx := context.Background()
	b := slowBucket("fallback", 10)
	b.MaxDebt = 40
	if got := ch.Charge(ctx, b, 4); got.Source != SourceRedis || got.Tokens != 4 || got.Remaining != 6 {
		t.Fatalf("charge with Redis up: %+v", got)
	}
	srv.Kill()
	other := slowBucket("other", 10)
	for deadline := time.Now().Add(10 * time.Second); ch.State() != "open"; {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not open")
		}
		ch.Allow(ctx, other, 1)
	}
	// Local share: mirrored 6/2 = 3 tokens, floor -20.
	got := ch.Charge(ctx, b, 30)
	if got.Source != SourceLocal || got.Tokens != 23 || got.Remaining != -20 {
		t.Fatalf("charge with Redis down: %+v, want 23 charged locally, -20 left", got)
	}
	if d, _ := ch.Allow(ctx, b, 1); d.Allowed || d.Source != SourceLocal || d.RetryAfter < 20*30*time.Minute {
		t.Fatalf("request with the local bucket in debt: %+v, want rejected locally, waiting for 21 tokens at half a token per hour", d)
	}
	open := b
	open.FailureMode = snapshot.FailOpen
	if got := ch.Charge(ctx, open, 5); got.Source != SourceFailOpen || got.Tokens != 0 {
		t.Fatalf("FailOpen charge with Redis down: %+v, want nothing charged", got)
	}
}
