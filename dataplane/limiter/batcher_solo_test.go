package limiter

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
			// then EVAL), and the first solo one dials the solo connection
			// (on a goroutine, as a worker would): not counted below.
			time.Sleep(tc.pause)
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

// TestSoloKeepsTheWaitBound: a solo Take waits no longer than MaxWait (or
// its own deadline) however slow the steps around the call are. Dialling
// a new connection and resending the script after NOSCRIPT are not
// bounded by the wait on the socket, so a solo Take must leave them to a
// goroutine, as a queued Take leaves them to a worker: (a) dials that take
// 800 ms, (b) a Redis that lost its scripts and whose EVAL reaches it 800
// ms late (a proxy holds it). MaxWait is 50 ms; through the workers the
// Take returns then, with an error.
func TestSoloKeepsTheWaitBound(t *testing.T) {
	const hold, maxWait = 800 * time.Millisecond, 50 * time.Millisecond
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name     string
		slowDial bool
		holdEval bool
	}{
		{"slow dial", true, false},
		{"NOSCRIPT, then a late EVAL", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := startHoldingProxy(t, srv.Addr(), hold, tc.holdEval)
			var slow atomic.Bool
			client := redis.NewClient(&redis.Options{Addr: proxy, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if slow.Load() {
					time.Sleep(hold)
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}})
			t.Cleanup(func() { _ = client.Close() })
			bt := NewBatcher(client, BatcherOptions{SoloGap: time.Nanosecond, MaxWait: maxWait, Timeout: time.Second})
			t.Cleanup(func() { _ = bt.Close() })
			b := Bucket{Key: Key("solo", tc.name), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}
			if tc.holdEval {
				// Connected and the script loaded, then lost.
				if err := srv.Client(t).ScriptLoad(context.Background(), tokenBucketSrc).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := bt.Take(context.Background(), b, 1, 1); err != nil {
					t.Fatal(err)
				}
				if err := srv.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			slow.Store(tc.slowDial)
			start := time.Now()
			_, err := bt.Take(context.Background(), b, 1, 1)
			if took := time.Since(start); took > hold/2 {
				t.Fatalf("the Take returned after %s (err %v); MaxWait is %s", took.Round(time.Millisecond), err, maxWait)
			}
			if err == nil {
				t.Fatal("the Take returned no error before its call could run")
			}
		})
	}
}

// startHoldingProxy forwards TCP to addr; with holdEval, a write of the
// client's that carries an EVAL (the script's text) is forwarded hold
// later. It returns the proxy's address.
func startHoldingProxy(t *testing.T, addr string, hold time.Duration, holdEval bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, s); c.Close() }()
			go func() {
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if holdEval && bytes.Contains(bytes.ToLower(buf[:n]), []byte("$4\r\neval\r\n")) {
							time.Sleep(hold)
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
