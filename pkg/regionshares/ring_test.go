package regionshares

import (
	"testing"
	"time"
)

func TestParseKey(t *testing.T) {
	cases := []struct {
		key          string
		rule, region string
		ok           bool
	}{
		{DemandKey("shop-a", "ns/r", "eu"), "ns/r", "eu", true},
		{DemandKey("rl:shop-a:orders@eu:3", "ns/r", "eu"), "ns/r", "eu", true},
		{"rl:{shop-a}:orders", "", "", false},
		{"rd:{x}:ns/r", "", "", false},
		{"rd:{x}:ns/r@", "", "", false},
	}
	for _, c := range cases {
		rule, region, ok := ParseKey(c.key)
		if rule != c.rule || region != c.region || ok != c.ok {
			t.Errorf("ParseKey(%q) = %q %q %v, want %q %q %v", c.key, rule, region, ok, c.rule, c.region, c.ok)
		}
	}
}

func TestParseRingAndReading(t *testing.T) {
	// 1 s windows; Redis time 100.5 s: window 100 is filling.
	ring, err := ParseRing(map[string]string{
		"w": "1000",
		"n": "10",
		"0": "100:50:0:50",   // current: not counted
		"9": "99:3:7:50",     // complete
		"8": "98:1.5:0.5:30", // complete
		"7": "87:100:0:50",   // out of the interval
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(100_500)
	var rd Reading
	rd.Add(ring, now, 2500*time.Millisecond, time.UnixMilli(98_000))
	// Windows 98 and 99 began within the last 2.5 s.
	if rd.Asked != 12 || rd.Span != 2*time.Second || rd.MaxShare != 50 {
		t.Fatalf("reading %+v, want 12 tokens over 2s, max share 50", rd)
	}
	o := rd.Observation()
	if !o.Heard || o.Rate != 6 || !o.Reachable {
		t.Fatalf("observation %+v, want heard at 6/s", o)
	}
	// An interval longer than a ring of 3 windows: the rate over the two
	// complete windows it holds, not over the interval.
	short := ring
	short.Slots = 3
	var capped Reading
	capped.Add(short, now, time.Minute, time.Time{})
	if capped.Asked != 12 || capped.Span != 2*time.Second {
		t.Fatalf("a ring shorter than the interval: %+v, want 12 tokens over 2s", capped)
	}
	var quiet Reading
	quiet.Add(Ring{Window: time.Second}, now, 2*time.Second, time.Time{})
	if o := quiet.Observation(); !o.Heard || !o.Reachable || o.Rate != 0 {
		t.Fatalf("a ring without tokens in the interval: %+v, want heard at 0/s", o)
	}
	var none Reading
	if o := none.Observation(); o.Heard {
		t.Fatalf("no ring: %+v, want not heard", o)
	}
	for _, bad := range []map[string]string{
		{"0": "1:2:3:4"},              // no window length
		{"w": "1000", "x": "1:2:3:4"}, // unknown field
		{"w": "1000", "0": "1:2:3"},   // short window
		{"w": "0", "0": "1:2:3:4"},    // bad length
		{"w": "1000", "0": "1:a:3:4"}, // bad number
	} {
		if _, err := ParseRing(bad); err == nil {
			t.Errorf("ParseRing(%v): no error", bad)
		}
	}
}
