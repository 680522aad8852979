package redistime

import (
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
