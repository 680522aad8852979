package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
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

// TestRefillBoundInTheSchema: the schema's rule on the refill time holds
// MaxRefillSeconds and MessageRefillTooSlow, which rule files are checked
// with.
func TestRefillBoundInTheSchema(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "ratelimit.tollgate.dev_ratelimitrules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Validations []struct {
								Rule    string `json:"rule"`
								Message string `json:"message"`
							} `json:"x-kubernetes-validations"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("the CRD: %v, %d versions", err, len(crd.Spec.Versions))
	}
	found := 0
	for _, v := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Validations {
		if v.Message == MessageRefillTooSlow {
			found++
			if !strings.HasSuffix(v.Rule, fmt.Sprintf("<= %d", MaxRefillSeconds)) {
				t.Errorf("the rule of %q does not end with <= %d: %s", v.Message, MaxRefillSeconds, v.Rule)
			}
		}
	}
	if found != 1 {
		t.Errorf("%d rules of spec with the message %q, want 1", found, MessageRefillTooSlow)
	}
	if !strings.Contains(MessageRefillTooSlow, fmt.Sprint(MaxRefillSeconds)) {
		t.Errorf("the message does not name the bound %d", MaxRefillSeconds)
	}
}

func TestValidClaimPath(t *testing.T) {
	for s, want := range map[string]bool{
		"plan": true, "org.plan": true, "https://example.com/plan": true, "a.b.c": true, "é": true, strings.Repeat("p", 256): true,
		"": false, ".plan": false, "plan.": false, "org..plan": false, "pl\nan": false, "pl\x7fan": false, strings.Repeat("p", 257): false,
	} {
		if got := ValidClaimPath(s); got != want {
			t.Errorf("ValidClaimPath(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"gold": true, "x y": true, "": false, "go\tld": false, strings.Repeat("v", 257): false} {
		if got := ValidClaimValue(s); got != want {
			t.Errorf("ValidClaimValue(%q) = %v, want %v", s, got, want)
		}
	}
}
