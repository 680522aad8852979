package urlpath

import "testing"

func TestPrefixMatch(t *testing.T) {
	for _, c := range []struct {
		prefix, p string
		want      bool
	}{
		{"/", "/anything", true},
		{"/orders", "/orders", true},
		{"/orders", "/orders/1", true},
		{"/orders", "/ordersx", false},
		{"/orders", "/order", false},
	} {
		if got := PrefixMatch(c.prefix, c.p); got != c.want {
			t.Errorf("PrefixMatch(%q, %q) = %v", c.prefix, c.p, got)
		}
	}
}

func TestClean(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/a/b": true, "/a/": true, "": false, "a": false,
		"//a": false, "/a//b": false, "/./a": false, "/a/..": false, "/a/../b": false,
	} {
		if got := Clean(p); got != want {
			t.Errorf("Clean(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestHost(t *testing.T) {
	for h, want := range map[string]string{
		"Example.com": "Example.com", "example.com:8080": "example.com", "example.com.": "example.com",
		"example.com.:80": "example.com", "[::1]:80": "[::1]", "[::1": "[::1",
	} {
		if got := Host(h); got != want {
			t.Errorf("Host(%q) = %q, want %q", h, got, want)
		}
	}
}
