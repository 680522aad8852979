package v1alpha1

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// schemaPattern is the pattern in the CRD; ValidSelector must agree with it.
var schemaPattern = regexp.MustCompile(`^(\*|[A-Za-z0-9][A-Za-z0-9._-]*)$`)

func TestValidSelectorMatchesSchema(t *testing.T) {
	cases := []string{"", "*", "**", "a", "shop-a", "Shop_A.eu-1", "-a", ".a", "_a", "a:b", "{a}", "a b", "a\x00",
		"é", strings.Repeat("a", 64), strings.Repeat("a", 65), "a*", "*a"}
	for _, s := range cases {
		want := schemaPattern.MatchString(s) && len(s) <= MaxIdentifierLength
		if got := ValidSelector(s); got != want {
			t.Errorf("ValidSelector(%q) = %v, schema says %v", s, got, want)
		}
	}
}

func FuzzValidIdentifier(f *testing.F) {
	f.Add("shop-a")
	f.Add("{x}:y")
	f.Fuzz(func(t *testing.T, s string) {
		want := s != "*" && schemaPattern.MatchString(s) && len(s) <= MaxIdentifierLength
		if got := ValidIdentifier(s); got != want {
			t.Fatalf("ValidIdentifier(%q) = %v, schema says %v", s, got, want)
		}
		if ValidIdentifier(s) && strings.ContainsAny(s, "{}:*") {
			t.Fatalf("%q is valid but could break a Redis key", s)
		}
	})
}

func TestFormatRate(t *testing.T) {
	cases := []struct {
		tokens int64
		period time.Duration
		want   string
	}{
		{100, time.Second, "100/s"},
		{10, time.Minute, "10/1m"},
		{1000, time.Hour, "1000/1h"},
		{5, 90 * time.Minute, "5/1h30m"},
		{1, 168 * time.Hour, "1/168h"},
		{3, 75 * time.Second, "3/1m15s"},
	}
	for _, c := range cases {
		if got := FormatRate(c.tokens, c.period); got != c.want {
			t.Errorf("FormatRate(%d, %v) = %q, want %q", c.tokens, c.period, got, c.want)
		}
	}
}
