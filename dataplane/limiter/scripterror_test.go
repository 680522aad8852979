package limiter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// TestScriptErrorLeavesTheBreakerClosed: the script fails on every call of
// one bucket (a key of another type where the bucket's 0.1 form would be:
// WRONGTYPE), deterministically. Redis answers; it is not failing. The
// node's breaker must stay closed however many calls fail, another
// tenant's bucket on the node keeps exact Redis answers, and the broken
// bucket's requests follow its rule's failure mode.
func TestScriptErrorLeavesTheBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	var redisErrs, scriptErrs atomic.Int64
	c := NewChain(ChainOptions{
		Client: srv.Client(t), Replicas: func() int { return 2 }, Coalesce: true, EmptyBucketCache: true,
		// The breaker opens after 3 failures spanning 50ms.
		Timeout: 50 * time.Millisecond, MaxWait: time.Second, FailuresToOpen: 3, OpenFor: time.Hour,
		ObserveRedis: func(_ time.Duration, err error) {
			if err != nil {
				redisErrs.Add(1)
			}
		},
		ScriptError: func(b Bucket, err error) {
			if !strings.HasPrefix(b.Key, "rl:{broken-") || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("script error reported for %s: %v", b.Key, err)
			}
			scriptErrs.Add(1)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	chain := &testChain{c}

	hour := int64(3600_000)
	broken := map[snapshot.FailureMode]Bucket{}
	for _, fm := range []snapshot.FailureMode{snapshot.LocalFallback, snapshot.FailOpen, snapshot.FailClosed} {
		b := Bucket{Key: Key("broken-"+fm.String(), "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: hour, FailureMode: fm}
		if err := rc.Set(ctx, b.Key, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		broken[fm] = b
	}
	steady := Bucket{Key: Key("steady", "r"), Capacity: 1000, RefillTokens: 1, RefillPeriodMs: hour}

	// A run of failures only, well past the span that opens a breaker
	// (nothing succeeds in between, as when a client retries in a loop).
	start := time.Now()
	localAdmitted, sent := 0, 0
	for i := 0; i < 30 || time.Since(start) < 200*time.Millisecond; i++ {
		d := chain.Decide(ctx, broken[snapshot.LocalFallback], 1)
		if d.Source != SourceLocal {
			t.Fatalf("request %d, LocalFallback: %+v, want a local decision", i, d)
		}
		if d.Allowed {
			localAdmitted++
		} else if d.RetryAfter < time.Hour {
			// The local bucket (5 tokens, one per 2 hours) decides: its
			// wait, not a blanket Retry-After of a second.
			t.Fatalf("request %d, LocalFallback rejected with RetryAfter %v, want the local bucket's wait", i, d.RetryAfter)
		}
		if d := chain.Decide(ctx, broken[snapshot.FailOpen], 1); !d.Allowed || d.Source != SourceFailOpen {
			t.Fatalf("request %d, FailOpen: %+v", i, d)
		}
		if d := chain.Decide(ctx, broken[snapshot.FailClosed], 1); d.Allowed || d.Source != SourceFailClosed || d.RetryAfter != time.Second {
			t.Fatalf("request %d, FailClosed: %+v", i, d)
		}
		sent += 3
	}
	if s := chain.State(); s != "closed" {
		t.Errorf("breaker %s after script errors, want closed (last error %v)", s, chain.LastError())
	}
	for i := range 20 {
		d := chain.Decide(ctx, steady, 1)
		if !d.Allowed || d.Source != SourceRedis || d.Remaining != int64(999-i) {
			t.Fatalf("request %d of another tenant: %+v, want admitted by Redis with %d left (breaker %s, last error %v)",
				i, d, 999-i, chain.State(), chain.LastError())
		}
	}
	if localAdmitted != 5 {
		t.Errorf("the LocalFallback bucket admitted %d, want its local share of 10 over 2 replicas, 5", localAdmitted)
	}
	if n := redisErrs.Load(); n != 0 {
		t.Errorf("%d script errors observed as Redis errors, want 0", n)
	}
	if n := scriptErrs.Load(); n != int64(sent) {
		t.Errorf("%d script errors reported, want one per broken request, %d", n, sent)
	}
}

// TestIsScriptError classifies real error replies of redis-server, through
// go-redis and through a worker's own connection, and the forms Redis 6
// gives the same errors.
func TestIsScriptError(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(srv.Port())))
	ctx := context.Background()
	rc := srv.Client(t)
	if err := rc.Set(ctx, "s", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eval := func(c *redis.Client, script string) error {
		return c.Eval(ctx, script, []string{"s"}).Err()
	}
	cases := []struct {
		name   string
		err    func() error
		script bool
	}{
		{"Lua error", func() error { return eval(rc, "error('boom')") }, true},
		{"nil index", func() error { return eval(rc, "local x; return x.y") }, true},
		{"WRONGTYPE in the script", func() error { return eval(rc, "return redis.call('HGET', KEYS[1], 'f')") }, true},
		{"PEXPIRE of 1.728e+17", func() error { return eval(rc, "return redis.call('PEXPIRE', KEYS[1], 1.728e17)") }, true},
		{"script that does not compile", func() error { return eval(rc, "return (") }, true},
		{"WRONGTYPE of a plain command", func() error { return rc.HGet(ctx, "s", "f").Err() }, false},
		{"NOSCRIPT", func() error { return rc.EvalSha(ctx, strings.Repeat("0", 40), []string{"s"}).Err() }, false},
		{"READONLY: a write in a script on a replica", func() error {
			c := replica.Client(t)
			var err error
			for range 100 { // until the replica has synced
				if err = eval(c, "return redis.call('SET', KEYS[1], 'x')"); err != nil && !strings.HasPrefix(err.Error(), "LOADING") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			return err
		}, false},
		{"OOM: a write in a script over maxmemory", func() error {
			if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				return err
			}
			defer rc.ConfigSet(ctx, "maxmemory", "0")
			return eval(rc, "return redis.call('SET', KEYS[1], 'x')")
		}, false},
		{"Redis 6: a command's error in a script", func() error {
			return replyError("ERR Error running script (call to f_0123): @user_script:217: ERR value is not an integer or out of range")
		}, true},
		{"Redis 6: OOM in a script", func() error {
			return replyError("ERR Error running script (call to f_0123): @user_script:1: OOM command not allowed when used memory > 'maxmemory'.")
		}, false},
		{"a reply that is not the script's", func() error { return replyError("unexpected status reply, want an array of integers") }, false},
		{"no reply", func() error { return ErrRedisSilent }, false},
		{"deadline", func() error { return context.DeadlineExceeded }, false},
		{"none", func() error { return nil }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil && tc.name != "none" {
				t.Fatal("no error")
			}
			// The reply is the one the row is about.
			for _, code := range []string{"WRONGTYPE", "NOSCRIPT", "READONLY", "OOM", "PEXPIRE"} {
				if strings.Contains(tc.name, code) && !strings.Contains(err.Error(), strings.Replace(code, "PEXPIRE", "not an integer", 1)) {
					t.Fatalf("reply %v, want a %s one", err, code)
				}
			}
			wrapped := fmt.Errorf("token bucket script: %w", err)
			if got := IsScriptError(wrapped); got != tc.script {
				t.Errorf("IsScriptError(%v) = %v, want %v", err, got, tc.script)
			}
		})
	}
	// A worker's own connection reads the same reply as go-redis does.
	b := Bucket{Key: Key("t", "s"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}
	if err := rc.Set(ctx, b.Key, "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, bt := newChain(t, backend{client: srv.Client(t)})
	if _, err := bt.Take(ctx, b, 1, 1); !IsScriptError(err) {
		t.Errorf("a worker's WRONGTYPE reply %v is not a script error", err)
	}
}
