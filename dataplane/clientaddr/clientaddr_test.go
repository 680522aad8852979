package clientaddr

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestClient(t *testing.T) {
	r, err := Parse("10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		peer      string
		xff, fwd  []string
		want      string
		malformed bool
	}{
		{name: "untrusted peer, no header", peer: "203.0.113.9:5000", want: "203.0.113.9"},
		{name: "untrusted peer, spoofed header ignored", peer: "203.0.113.9:5000", xff: []string{"198.51.100.1"}, want: "203.0.113.9"},
		{name: "trusted peer, one hop", peer: "10.1.2.3:80", xff: []string{"198.51.100.1"}, want: "198.51.100.1"},
		{name: "trusted peer, spoofed leftmost skipped", peer: "10.1.2.3:80", xff: []string{"6.6.6.6, 198.51.100.1, 10.9.9.9"}, want: "198.51.100.1"},
		{name: "several header lines", peer: "10.1.2.3:80", xff: []string{"6.6.6.6", "198.51.100.1", "10.9.9.9"}, want: "198.51.100.1"},
		{name: "all trusted: the leftmost", peer: "10.1.2.3:80", xff: []string{"10.0.0.1, 192.0.2.7"}, want: "10.0.0.1"},
		{name: "IPv6 hops", peer: "[2001:db8:ffff::1]:443", xff: []string{"2001:db8:1::5, 2001:db8:ffff::2"}, want: "2001:db8:1::5"},
		{name: "mixed: IPv6 proxy, IPv4 client", peer: "[2001:db8:ffff::1]:443", xff: []string{"198.51.100.1"}, want: "198.51.100.1"},
		{name: "IPv4-mapped peer and hop", peer: "[::ffff:10.1.2.3]:80", xff: []string{"::ffff:198.51.100.1"}, want: "198.51.100.1"},
		{name: "hop with a port", peer: "10.1.2.3:80", xff: []string{"[2001:db8:1::5]:4711"}, want: "2001:db8:1::5"},
		{name: "malformed hop: the peer", peer: "10.1.2.3:80", xff: []string{"198.51.100.1, not-an-ip"}, want: "10.1.2.3", malformed: true},
		{name: "empty hop: the peer", peer: "10.1.2.3:80", xff: []string{"198.51.100.1,,"}, want: "10.1.2.3", malformed: true},
		{name: "Forwarded when no XFF", peer: "10.1.2.3:80", fwd: []string{`for=6.6.6.6, for="[2001:db8:1::5]:4711";proto=https, for=10.0.0.2`}, want: "2001:db8:1::5"},
		{name: "XFF wins over Forwarded", peer: "10.1.2.3:80", xff: []string{"198.51.100.1"}, fwd: []string{"for=6.6.6.6"}, want: "198.51.100.1"},
		{name: "Forwarded unknown: the peer", peer: "10.1.2.3:80", fwd: []string{"for=unknown"}, want: "10.1.2.3", malformed: true},
		{name: "untrusted peer, Forwarded ignored", peer: "203.0.113.9:1", fwd: []string{"for=6.6.6.6"}, want: "203.0.113.9"},
	}
	for _, c := range cases {
		h := http.Header{}
		for _, v := range c.xff {
			h.Add("X-Forwarded-For", v)
		}
		for _, v := range c.fwd {
			h.Add("Forwarded", v)
		}
		got, malformed := r.Client(c.peer, h)
		if got != netip.MustParseAddr(c.want) || malformed != c.malformed {
			t.Errorf("%s: %v (malformed %v), want %s (malformed %v)", c.name, got, malformed, c.want, c.malformed)
		}
	}
}

func TestNoTrustedProxies(t *testing.T) {
	var r *Resolver
	h := http.Header{"X-Forwarded-For": {"198.51.100.1"}}
	if got, _ := r.Client("10.1.2.3:80", h); got != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("nil resolver: %v", got)
	}
	empty, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := empty.Client("10.1.2.3:80", h); got != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("empty list: %v", got)
	}
	if got, _ := empty.Client("not an address", h); got.IsValid() {
		t.Errorf("unparsable peer: %v", got)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8,,garbage"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func TestMaxHops(t *testing.T) {
	r, _ := Parse("10.0.0.0/8")
	h := http.Header{}
	for range MaxHops + 5 {
		h.Add("X-Forwarded-For", "10.0.0.1")
	}
	h.Set("X-Forwarded-For", "198.51.100.1")
	for range MaxHops + 5 {
		h.Add("X-Forwarded-For", "10.0.0.1")
	}
	if got, _ := r.Client("10.1.1.1:1", h); got != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("walk past MaxHops gave %v, want the hop at the bound", got)
	}
}

func TestClientDoesNotAllocate(t *testing.T) {
	r, _ := Parse("10.0.0.0/8")
	h := http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.1, 10.9.9.9"}}
	if n := testing.AllocsPerRun(100, func() { r.Client("10.1.2.3:80", h) }); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

func FuzzClient(f *testing.F) {
	r, _ := Parse("10.0.0.0/8,::1/128")
	f.Add("10.1.1.1:1", "1.2.3.4, 10.0.0.1", `for="[::1]:1"`)
	f.Fuzz(func(t *testing.T, peer, xff, fwd string) {
		h := http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}
		r.Client(peer, h)
		delete(h, "X-Forwarded-For")
		r.Client(peer, h)
	})
}
