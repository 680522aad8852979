package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestSoloSends: Takes one after another (nothing queued, nothing in
// flight), each SoloGap after the one before, are each sent by their own
// goroutine, one round trip each, and decided exactly as through the
// workers; with NoSolo, or closer together than SoloGap, every one goes
// through a worker.
func TestSoloSends(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		noSolo bool
		gap    time.Duration // BatcherOptions.SoloGap
		pause  time.Duration // between Takes
		solo   int64
	}{
		{"solo", false, 0, 2 * DefaultSoloGap, 8},
		{"NoSolo", true, 0, 2 * DefaultSoloGap, 0},
		{"closer than the gap", false, time.Hour, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bt := NewBatcher(srv.Client(t), BatcherOptions{NoSolo: tc.noSolo, SoloGap: tc.gap})
			t.Cleanup(func() { _ = bt.Close() })
			b := Bucket{Key: Key("solo", tc.name), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 3600_000}
			// The first call of a fresh server loads the script (NOSCRIPT,
			// then EVAL): not counted below.
			if _, err := bt.Take(context.Background(), Bucket{Key: Key("solo", "warm"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000}, 1, 1); err != nil {
				t.Fatal(err)
			}
			rt0, calls0, dec0 := bt.Stats()
			solo0 := bt.soloSends.Load()
			admitted := 0
			for i := range 8 {
				time.Sleep(tc.pause)
				r, err := bt.Take(context.Background(), b, 1, 1)
				if err != nil {
					t.Fatalf("take %d: %v", i, err)
				}
				admitted += int(r.Granted)
				if want := int64(max(0, 4-i)); r.Remaining != want {
					t.Fatalf("take %d: remaining %d, want %d", i, r.Remaining, want)
				}
			}
			if admitted != 5 {
				t.Fatalf("admitted %d of 8 on a bucket of 5, want 5", admitted)
			}
			roundTrips, commands, decisions := bt.Stats()
			roundTrips, commands, decisions = roundTrips-rt0, commands-calls0, decisions-dec0
			if roundTrips != 8 || commands != 8 || decisions != 8 {
				t.Fatalf("stats %d round trips, %d calls, %d decisions; want 8 each", roundTrips, commands, decisions)
			}
			if got := bt.soloSends.Load() - solo0; got != tc.solo {
				t.Fatalf("%d solo sends, want %d", got, tc.solo)
			}
		})
	}
}

// TestSoloSlowRedis: a solo Take whose reply does not start within Timeout
// goes on as a worker's call would: Redis frozen, the watchdog's PING goes
// unanswered and the Take fails with ErrRedisSilent long before its own
// deadline; when Redis resumes, the call runs (its deadline had not
// passed) and its tokens reach the Late handler instead of being lost.
// Meanwhile the solo connection is busy, so the next Take goes through a
// worker; once the late reply is read the connection serves solo again.
func TestSoloSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	lates := make(chan TakeResult, 4)
	bt := NewBatcher(srv.Client(t), BatcherOptions{SoloGap: time.Nanosecond, Late: func(_ *Bucket, r TakeResult) { lates <- r }})
	t.Cleanup(func() { _ = bt.Close() })
	b := Bucket{Key: Key("solo", "slow"), Capacity: 3, RefillTokens: 1, RefillPeriodMs: 3600_000, keepsLate: true}
	if _, err := bt.Take(context.Background(), b, 1, 1); err != nil { // connects
		t.Fatal(err)
	}

	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := bt.Take(ctx, b, 1, 1)
	if !errors.Is(err, ErrRedisSilent) {
		t.Fatalf("a solo Take to a frozen Redis: %v, want ErrRedisSilent", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the Take waited for its own deadline instead of the watchdog's verdict")
	}
	var second atomic.Value
	go func() {
		_, err := bt.Take(ctx, b, 1, 1)
		second.Store(errOrNil{err})
	}()
	srv.Resume()
	select {
	case r := <-lates:
		if r.Granted != 1 {
			t.Fatalf("the late reply granted %d, want 1", r.Granted)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reply Redis sent after resuming never reached the Late handler")
	}
	for deadline := time.Now().Add(20 * time.Second); second.Load() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Take sent while the solo connection was busy never returned")
		}
	}
	before := bt.soloSends.Load()
	for deadline := time.Now().Add(20 * time.Second); bt.soloSends.Load() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the solo connection was never given back after the late reply")
		}
		r, err := bt.Take(context.Background(), b, 1, 1)
		if err != nil || r.Granted != 0 && r.Remaining < 0 {
			t.Fatalf("%+v %v", r, err)
		}
	}
	// Exact: 1 before the freeze, 1 late (kept), and at most 1 more.
	r, err := bt.Take(context.Background(), b, 1, 1)
	if err != nil || r.Granted != 0 || r.Remaining != 0 {
		t.Fatalf("after 4+ takes of a bucket of 3: %+v %v, want refused with 0 remaining", r, err)
	}
}

type errOrNil struct{ error }
