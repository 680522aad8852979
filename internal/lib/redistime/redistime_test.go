package redistime

import (
	"context"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const trueOffset = 5_000 // Redis runs 5 s ahead
	// reply is a reply read at local time at (ms after base) that took
	// delay ms to arrive after Redis read its clock.
	type reply struct{ at, delay, redisShift int64 }
	for _, tc := range []struct {
		name    string
		replies []reply
		want    int64
	}{
		{"one reply: its delay counts", []reply{{0, 40, 0}}, trueOffset - 40},
		{"a slow reply does not pull the estimate back", []reply{{0, 1, 0}, {100, 150, 0}}, trueOffset - 1},
		{"a faster reply improves it", []reply{{0, 30, 0}, {100, 2, 0}}, trueOffset - 2},
		{"kept for the next window", []reply{{0, 1, 0}, {10_500, 80, 0}}, trueOffset - 1},
		{"forgotten after two windows", []reply{{0, 1, 0}, {10_500, 80, 0}, {21_000, 60, 0}}, trueOffset - 60},
		{"Redis's clock goes back: start over", []reply{{0, 1, 0}, {100, 3, -30_000}}, trueOffset - 30_000 - 3},
		{"a small drop is a slow reply, not a clock change", []reply{{0, 1, 0}, {100, 900, 0}}, trueOffset - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Clock
			if _, ok := c.Offset(); ok {
				t.Fatal("known before any reply")
			}
			for _, r := range tc.replies {
				recv := base.Add(time.Duration(r.at) * time.Millisecond)
				redisMs := recv.UnixMilli() - r.delay + trueOffset + r.redisShift
				c.Observe(redisMs, recv)
			}
			got, ok := c.Offset()
			if !ok || got != tc.want {
				t.Fatalf("offset %d (known %v), want %d", got, ok, tc.want)
			}
			at, _ := c.At(base)
			if at != base.UnixMilli()+tc.want {
				t.Errorf("At: %d, want %d", at, base.UnixMilli()+tc.want)
			}
		})
	}
}

// TestDeadline: a context's deadline in Redis time, with the slack, and 0
// without a deadline or before Redis's clock is known.
func TestDeadline(t *testing.T) {
	var c Clock
	now := time.UnixMilli(1_000_000)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(50*time.Millisecond))
	defer cancel()
	if got := c.Deadline(ctx, 2); got != 0 {
		t.Errorf("before any reply: %d, want 0", got)
	}
	c.Observe(5_000_000, now) // Redis is 4,000,000 ms ahead
	if got := c.Deadline(ctx, 2); got != 5_000_052 {
		t.Errorf("Deadline = %d, want 5000052", got)
	}
	if got := c.Deadline(context.Background(), 2); got != 0 {
		t.Errorf("no deadline: %d, want 0", got)
	}
	if got := c.DeadlineAt(now, 0); got != 5_000_000 {
		t.Errorf("DeadlineAt(now, 0) = %d, want 5000000", got)
	}
}
