package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

func newTestChain(t *testing.T, srv *redistest.Server) *testChain {
	t.Helper()
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Replicas: func() int { return 2 }, Coalesce: true, EmptyBucketCache: true,
		Timeout: 300 * time.Millisecond, MaxWait: 600 * time.Millisecond, FailuresToOpen: 3, OpenFor: 100 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; _ = c.Close() })
	return &testChain{c}
}

// testChain adds Decide (Allow without the error, which is always nil).
type testChain struct{ *Chain }

func (c *testChain) Decide(ctx context.Context, b Bucket, cost int64) Outcome {
	d, _ := c.Allow(ctx, b, cost)
	return d
}

func waitState(t *testing.T, f *testChain, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for f.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %s, want %s", f.State(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFailoverOpensFallsBackAndRecoversWithoutTraffic(t *testing.T) {
	for _, failure := range []string{"kill", "pause"} {
		t.Run(failure, func(t *testing.T) {
			srv := redistest.Start(t)
			f := newTestChain(t, srv)
			ctx := context.Background()
			b := Bucket{Key: Key("t", failure), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
			if d := f.Decide(ctx, b, 1); !d.Allowed || d.Source != SourceRedis || d.Remaining != 9 {
				t.Fatalf("healthy: %+v", d)
			}
			if failure == "kill" {
				srv.Kill()
			} else {
				srv.Pause()
			}
			for f.State() != "open" {
				if d := f.Decide(ctx, b, 1); d.Source != SourceLocal {
					t.Fatalf("a failed call must fall back locally: %+v", d)
				}
			}
			waited := f.Waited()
			for range 100 {
				d := f.Decide(ctx, b, 1)
				if d.Source != SourceLocal {
					t.Fatalf("open breaker: %+v, want a local decision", d)
				}
			}
			if f.Waited() != waited {
				t.Fatalf("%d requests waited for Redis while the breaker was open", f.Waited()-waited)
			}
			if failure == "kill" {
				srv.Restart(t)
			} else {
				// Past the failed calls' deadlines (MaxWait).
				time.Sleep(700 * time.Millisecond)
				srv.Resume()
			}
			// No request is sent: the background probe closes the breaker.
			waitState(t, f, "closed")
			d := f.Decide(ctx, b, 1)
			if d.Source != SourceRedis {
				t.Fatalf("after recovery: %+v, want a Redis decision", d)
			}
			// After a pause the bucket in Redis is used again. The calls that
			// failed before the breaker opened were written to the socket,
			// but Redis runs them after their deadline when it resumes: they
			// take nothing.
			if failure == "pause" && d.Remaining != 8 {
				t.Fatalf("after a pause: remaining %d, want 8 (the Redis bucket, and no stale call charged)", d.Remaining)
			}
		})
	}
}

func TestFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	f := newTestChain(t, srv)
	srv.Kill()
	ctx := context.Background()
	open := Bucket{Key: Key("t", "open"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 3600_000, FailureMode: snapshot.FailOpen}
	closed := Bucket{Key: Key("t", "closed"), Capacity: 100, RefillTokens: 100, RefillPeriodMs: 1000, FailureMode: snapshot.FailClosed}
	for range 10 {
		if d := f.Decide(ctx, open, 1); !d.Allowed || d.Source != SourceFailOpen {
			t.Fatalf("fail open: %+v", d)
		}
		if d := f.Decide(ctx, closed, 1); d.Allowed || d.Source != SourceFailClosed || d.RetryAfter != time.Second {
			t.Fatalf("fail closed: %+v", d)
		}
	}
}

// TestStateChangeSaysWhy: the breakers' opening is reported with Redis's
// error that opened them, the refused connection of a killed server.
func TestStateChangeSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	changes := make(chan StateChange, 16)
	c := NewChain(ChainOptions{
		Client: srv.Client(t), FailuresToOpen: 1, OpenFor: time.Hour,
		OnStateChange: func(ch StateChange) { changes <- ch },
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("t", "why"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	srv.Kill()
	for deadline := time.Now().Add(20 * time.Second); c.State() != "open"; {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not open")
		}
		c.Allow(ctx, b, 1)
	}
	select {
	case ch := <-changes:
		if ch.From != "closed" || ch.To != "open" || ch.LastError == nil || !redisGone(ch.LastError) {
			t.Fatalf("state change %+v, want closed to open with the refused connection", ch)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no state change reported")
	}
}
