package identity

import (
	"testing"
	"time"
)

func TestFailureLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewFailureLimiter(FailureOptions{Burst: 3, PerSecond: 1, MaxAddresses: 2, Clock: func() time.Time { return now }})
	const a, b = "192.0.2.1:1000", "192.0.2.2:1000"
	if _, blocked := l.Blocked(a); blocked {
		t.Fatal("blocked before any failure")
	}
	for i := range 3 {
		if _, ok := l.Fail(a); !ok {
			t.Fatalf("failure %d refused, burst is 3", i+1)
		}
	}
	if wait, blocked := l.Blocked("192.0.2.1:2000"); !blocked || wait != time.Second {
		t.Fatalf("after 3 failures (another port of the same IP): blocked=%v wait=%v, want true 1s", blocked, wait)
	}
	if _, ok := l.Fail(a); ok {
		t.Fatal("a 4th failure was allowed")
	}
	if _, blocked := l.Blocked(b); blocked {
		t.Fatal("another address is blocked")
	}
	now = now.Add(time.Second)
	if _, blocked := l.Blocked(a); blocked {
		t.Fatal("still blocked after a refill of one token")
	}
	// Full again after 3s: forgotten.
	now = now.Add(3 * time.Second)
	if _, blocked := l.Blocked(a); blocked || l.Len() != 0 {
		t.Fatalf("blocked=%v, %d tracked after a full refill, want 0", blocked, l.Len())
	}

	// IPv6 hosts share their /64; IPv4-mapped addresses are IPv4.
	for _, addr := range []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:2", "[2001:db8:1:2::3]:3"} {
		l.Fail(addr)
	}
	if _, blocked := l.Blocked("[2001:db8:1:2::77]:4"); !blocked {
		t.Error("another host of the same /64 is not blocked")
	}
	if _, blocked := l.Blocked("[2001:db8:1:3::1]:4"); blocked {
		t.Error("another /64 is blocked")
	}
	if a, _ := ClientAddr("[::ffff:192.0.2.9]:80"); a.String() != "192.0.2.9" {
		t.Errorf("IPv4-mapped address keyed as %v", a)
	}
}

// TestFailureLimiterBounded: more failing addresses than MaxAddresses share
// one overflow bucket; memory stays at MaxAddresses entries.
func TestFailureLimiterBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewFailureLimiter(FailureOptions{Burst: 2, PerSecond: 0.001, MaxAddresses: 2, Clock: func() time.Time { return now }})
	l.Fail("198.51.100.1:1")
	l.Fail("198.51.100.2:1")
	// The table is full: new addresses share the overflow bucket (burst 2).
	if _, ok := l.Fail("198.51.100.3:1"); !ok {
		t.Fatal("first overflow failure refused")
	}
	if _, ok := l.Fail("198.51.100.4:1"); !ok {
		t.Fatal("second overflow failure refused")
	}
	if _, ok := l.Fail("198.51.100.5:1"); ok {
		t.Fatal("the overflow bucket allowed more than its burst")
	}
	if _, blocked := l.Blocked("198.51.100.6:1"); !blocked {
		t.Fatal("an untracked address is not limited while the overflow is spent")
	}
	if l.Len() != 2 {
		t.Fatalf("%d addresses tracked, want at most 2", l.Len())
	}
	if NewFailureLimiter(FailureOptions{}) != nil {
		t.Fatal("burst 0 does not disable the limiter")
	}
	var off *FailureLimiter
	if _, ok := off.Fail("x"); !ok {
		t.Fatal("a nil limiter refused a failure")
	}
}

func TestFailureLimiterNoAllocsWhenIdle(t *testing.T) {
	l := NewFailureLimiter(FailureOptions{Burst: 3, PerSecond: 1, MaxAddresses: 10})
	if n := testing.AllocsPerRun(100, func() { l.Blocked("192.0.2.1:1000") }); n != 0 {
		t.Errorf("Blocked allocates %v times", n)
	}
	l.Fail("192.0.2.1:1000")
	if n := testing.AllocsPerRun(100, func() { l.Blocked("192.0.2.7:1000") }); n != 0 {
		t.Errorf("Blocked with a tracked address allocates %v times", n)
	}
}
