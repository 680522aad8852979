package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// doc renders one RateLimitRule manifest; spec is indented by the caller's
// lines being prefixed with two spaces.
func doc(name, spec string) string {
	return "apiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRule\nmetadata:\n  name: " + name +
		"\nspec:\n" + indent(spec)
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString("  " + line)
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// refillBound is the schema's message for a refill slower than 2^53 ms:
// a rule file gets the API server's.
const refillBound = v1alpha1.MessageRefillTooSlow

const spec1 = "tenant: shop-a\nroute: orders\ncapacity: 10\nrefillPerSecond: 5\n"

// rulesOf loads the manifests of one file as FileSource would.
func rulesOf(content string) ([]snapshot.Rule, []string, error) {
	c, err := loadFiles([]ruleFile{{name: "rules.yaml", data: []byte(content)}}, time.Now())
	if err != nil {
		return nil, nil, err
	}
	return c.rules, c.warnings, nil
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // "namespace/name" of the rules, in order
	}{
		{name: "one document", content: doc("a", spec1), want: []string{"default/a"}},
		{name: "empty file", content: "", want: nil},
		{name: "comments only", content: "# nothing yet\n\n", want: nil},
		{
			name: "multi-document with empty and comment-only documents",
			content: "---\n" + doc("a", spec1) + "---\n# a comment\n---\n\n---\n" +
				doc("b", "tenant: shop-b\nroute: '*'\ncapacity: 1\nrefillPerSecond: 1") + "---\n",
			want: []string{"default/a", "default/b"},
		},
		{name: "separator with a comment", content: doc("a", spec1) + "--- # next\n" + doc("b", "tenant: x\nroute: z\ncapacity: 1\nrefillPerSecond: 1"), want: []string{"default/a", "default/b"}},
		{name: "CRLF line endings", content: strings.ReplaceAll(doc("a", spec1)+"---\n"+doc("b", "tenant: x\nroute: z\ncapacity: 1\nrefillPerSecond: 1"), "\n", "\r\n"), want: []string{"default/a", "default/b"}},
		{name: "explicit namespace", content: strings.Replace(doc("a", spec1), "name: a", "name: a\n  namespace: team-1", 1), want: []string{"team-1/a"}},
		{
			name:    "JSON",
			content: `{"apiVersion":"ratelimit.tollgate.dev/v1alpha1","kind":"RateLimitRule","metadata":{"name":"j"},"spec":{"tenant":"t","route":"r","capacity":1,"refill":{"tokens":10,"period":"1m"}}}`,
			want:    []string{"default/j"},
		},
		{
			name: "typed list, items without kind",
			content: "apiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRuleList\nitems:\n" +
				"- metadata: {name: a}\n  spec: {tenant: t, route: r, capacity: 1, refillPerSecond: 1}\n" +
				"- apiVersion: ratelimit.tollgate.dev/v1alpha1\n  kind: RateLimitRule\n  metadata: {name: b, namespace: x}\n  spec: {tenant: t, route: s, capacity: 1, refillPerSecond: 1}\n",
			want: []string{"default/a", "x/b"},
		},
		{
			name: "v1 List as kubectl get -o yaml prints it",
			content: "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n" +
				"- apiVersion: ratelimit.tollgate.dev/v1alpha1\n  kind: RateLimitRule\n" +
				"  metadata: {name: a, namespace: default, uid: 0c1d6f8a-6d4e-4b7e-9d6a-3c0f4d2f5e11, resourceVersion: '5', generation: 2, creationTimestamp: '2024-01-01T00:00:00Z'}\n" +
				"  spec: {tenant: t, route: r, capacity: 1, refillPerSecond: 1, mode: Enforce, failureMode: LocalFallback}\n" +
				"  status: {rate: 1/s, publishedVersion: 3}\n",
			want: []string{"default/a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, warnings, err := rulesOf(tt.content)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(warnings) > 0 {
				t.Errorf("unexpected warnings: %q", warnings)
			}
			var got []string
			for _, r := range rules {
				got = append(got, r.Source)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("rules from %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the error
	}{
		{name: "unknown spec field", content: doc("a", spec1+"tenantt: x"), want: []string{"rules.yaml: document 1 (line 1)", `unknown field "spec.tenantt"`}},
		{name: "field in the wrong case", content: doc("a", "Tenant: shop-a\nroute: r\ncapacity: 1\nrefillPerSecond: 1"), want: []string{`unknown field "spec.Tenant"`}},
		{name: "unknown top-level field", content: doc("a", spec1) + "extra: 1\n", want: []string{`unknown field "extra"`}},
		{name: "duplicate key", content: doc("a", spec1+"capacity: 11"), want: []string{"capacity", "already"}},
		{name: "wrong kind", content: strings.Replace(doc("a", spec1), "kind: RateLimitRule", "kind: ConfigMap", 1), want: []string{`kind "ConfigMap"`}},
		{name: "wrong version", content: strings.Replace(doc("a", spec1), "v1alpha1", "v1beta9", 1), want: []string{`apiVersion "ratelimit.tollgate.dev/v1beta9"`}},
		{name: "missing kind", content: strings.Replace(doc("a", spec1), "kind: RateLimitRule\n", "", 1), want: []string{"kind missing"}},
		{name: "missing name", content: strings.Replace(doc("a", spec1), "name: a", "labels: {k: v}", 1), want: []string{"metadata.name: missing"}},
		{name: "invalid name", content: doc("Bad_Name", spec1), want: []string{`metadata.name "Bad_Name"`}},
		{name: "invalid namespace", content: strings.Replace(doc("a", spec1), "name: a", "name: a\n  namespace: a.b", 1), want: []string{"metadata.namespace"}},
		{name: "not a mapping", content: "- a\n- b\n", want: []string{"not a mapping"}},
		{name: "two documents without a separator", content: doc("a", spec1) + "...\n" + doc("b", spec1), want: []string{"more than one YAML document"}},
		{name: "separator with content", content: doc("a", spec1) + "--- x: 1\n", want: []string{"more than one YAML document"}},
		{name: "YAML 1.1 boolean", content: doc("a", "tenant: t\nroute: on\ncapacity: 1\nrefillPerSecond: 1"), want: []string{"spec.route", "quote"}},
		{name: "wrong type names the field", content: doc("a", "tenant: t\nroute: r\ncapacity: lots\nrefillPerSecond: 1"), want: []string{"spec.capacity"}},
		{name: "syntax error has the file's line number", content: doc("a", spec1) + "---\n\n" + doc("b", spec1) + "  bad: [\n", want: []string{"document 2 (line 11)", "yaml: line 21"}},
		{name: "milliseconds period", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 1500ms}"), want: []string{`spec.refill.period "1500ms"`, "whole seconds"}},
		{name: "fractional period", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 1.5s}"), want: []string{`spec.refill.period "1.5s"`}},
		{name: "period with days", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 1d}"), want: []string{`spec.refill.period "1d"`}},
		{name: "numeric period", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 60}"), want: []string{"spec.refill.period: must be a string"}},
		{name: "null period", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: null}"), want: []string{"spec.refill.period"}},
		{name: "period too short", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 0s}"), want: []string{"refill period 0ms out of range"}},
		{name: "period too long", content: doc("a", "tenant: t\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 169h}"), want: []string{"out of range"}},
		{name: "both rates", content: doc("a", spec1+"refill: {tokens: 1, period: 1m}"), want: []string{"exactly one of"}},
		{name: "no rate", content: doc("a", "tenant: t\nroute: r\ncapacity: 1"), want: []string{"exactly one of"}},
		{name: "invalid tenant", content: doc("a", "tenant: 'a b'\nroute: r\ncapacity: 1\nrefillPerSecond: 1"), want: []string{"default/a", `tenant "a b"`}},
		{name: "capacity zero", content: doc("a", "tenant: t\nroute: r\ncapacity: 0\nrefillPerSecond: 1"), want: []string{"capacity 0 out of range"}},
		{name: "unknown mode", content: doc("a", spec1+"mode: Sometimes"), want: []string{`spec.mode "Sometimes"`}},
		{name: "unknown failure mode", content: doc("a", spec1+"failureMode: Maybe"), want: []string{`spec.failureMode "Maybe"`}},
		{name: "duplicate namespace/name", content: doc("a", spec1) + "---\n" + doc("a", "tenant: x\nroute: z\ncapacity: 1\nrefillPerSecond: 1"), want: []string{"document 2 (line 11): RateLimitRule default/a is already defined at rules.yaml: document 1 (line 1)"}},
		{name: "v1 List item of another kind", content: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n", want: []string{"items[0]", `kind "ConfigMap"`}},
		{name: "v1 List item without kind", content: "apiVersion: v1\nkind: List\nitems:\n- {metadata: {name: x}}\n", want: []string{"items[0]", "apiVersion and kind missing"}},
		{name: "bad list item names it", content: "apiVersion: ratelimit.tollgate.dev/v1alpha1\nkind: RateLimitRuleList\nitems:\n- {metadata: {name: a}, spec: {tenant: t, route: r, capacity: 1, refillPerSecond: 1}}\n- {metadata: {name: b}, spec: {tenant: t, route: r, capacity: 1, refillPerSecond: 1, burst: 3}}\n", want: []string{"items[1]", `unknown field "spec.burst"`}},
		// The schema's bound on the refill time, with its message (issue 27).
		{name: "a billion tokens refilled one a day", content: doc("a", "tenant: t\nroute: r\ncapacity: 1000000000\nrefill: {tokens: 1, period: 24h}"),
			want: []string{"default/a", refillBound}},
		{name: "refill just over 2^53 ms", content: doc("a", "tenant: t\nroute: r\ncapacity: 14892856\nrefill: {tokens: 1, period: 168h}"),
			want: []string{"default/a", refillBound, "(this one: 9007199308800 seconds)"}},
		{name: "a debt over 2^53 ms", content: doc("a", "tenant: t\nroute: r\ncapacity: 7446427\nrefill: {tokens: 1, period: 168h}\ncost: {response: {header: X-Usage, maxDebt: 7446429}}"),
			want: []string{"default/a", refillBound}},
		{name: "a default debt over 2^53 ms", content: doc("a", "tenant: t\nroute: r\ncapacity: 7446428\nrefill: {tokens: 1, period: 168h}\ncost: {response: {header: X-Usage}}"),
			want: []string{"default/a", refillBound}},
		{name: "every bad document is reported", content: doc("a", spec1+"x: 1") + "---\n" + doc("b", spec1+"w: 1"), want: []string{`"spec.x"`, `"spec.w"`, "document 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, _, err := rulesOf(tt.content)
			if err == nil {
				t.Fatalf("no error; rules %+v", rules)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCompileConflicts(t *testing.T) {
	// b-rule comes first in the file and claims to be older, but files have
	// no creation time: a-rule wins by name.
	older := strings.Replace(doc("b-rule", "tenant: t\nroute: r\ncapacity: 2\nrefillPerSecond: 1"),
		"name: b-rule", "name: b-rule\n  creationTimestamp: '2020-01-01T00:00:00Z'", 1)
	content := older + "---\n" + doc("a-rule", "tenant: t\nroute: r\ncapacity: 1\nrefillPerSecond: 1")
	rules, warnings, err := rulesOf(content)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || rules[0].Source != "default/a-rule" {
		t.Fatalf("rules %+v, want only default/a-rule", rules)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "default/b-rule is ignored") ||
		!strings.Contains(warnings[0], "default/a-rule (rules.yaml: document 2") {
		t.Errorf("warnings %q", warnings)
	}
}

func TestCompileValues(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want snapshot.Rule // Source is always default/r
	}{
		{name: "per second", spec: "tenant: t\nroute: r\ncapacity: 20\nrefillPerSecond: 10",
			want: snapshot.Rule{Tenant: "t", Route: "r", Capacity: 20, RefillTokens: 10, RefillPeriodMs: 1000}},
		{name: "10 per minute", spec: "tenant: t\nroute: r\ncapacity: 3\nrefill: {tokens: 10, period: 1m}",
			want: snapshot.Rule{Tenant: "t", Route: "r", Capacity: 3, RefillTokens: 10, RefillPeriodMs: 60000}},
		{name: "1h30m", spec: "tenant: t\nroute: '*'\ncapacity: 1\nrefill: {tokens: 5, period: 1h30m}",
			want: snapshot.Rule{Tenant: "t", Route: "*", Capacity: 1, RefillTokens: 5, RefillPeriodMs: 5400000}},
		{name: "shadow, fail open", spec: "tenant: '*'\nroute: r\ncapacity: 1\nrefillPerSecond: 1\nmode: Shadow\nfailureMode: FailOpen",
			want: snapshot.Rule{Tenant: "*", Route: "r", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000, Shadow: true, FailureMode: snapshot.FailOpen}},
		{name: "fail closed", spec: "tenant: t\nroute: r\ncapacity: 1\nrefillPerSecond: 1\nfailureMode: FailClosed",
			want: snapshot.Rule{Tenant: "t", Route: "r", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000, FailureMode: snapshot.FailClosed}},
		{name: "a refill just under 2^53 ms", spec: "tenant: t\nroute: r\ncapacity: 14892855\nrefill: {tokens: 1, period: 168h}",
			want: snapshot.Rule{Tenant: "t", Route: "r", Capacity: 14_892_855, RefillTokens: 1, RefillPeriodMs: 604_800_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, _, err := rulesOf(doc("r", tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Source = "default/r"
			if len(rules) != 1 || !reflect.DeepEqual(rules[0], tt.want) {
				t.Errorf("rules %+v, want %+v", rules, tt.want)
			}
		})
	}
}

// FuzzParseManifests feeds arbitrary bytes to the manifest parser: it must
// never panic, and whatever it accepts must compile to valid rules, at most
// one per tenant+route.
func FuzzParseManifests(f *testing.F) {
	samples, _ := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*.yaml"))
	for _, p := range samples {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(doc("a", spec1) + "---\n" + doc("b", "tenant: '*'\nroute: r\ncapacity: 1\nrefill: {tokens: 1, period: 1h}")))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: ratelimit.tollgate.dev/v1alpha1, kind: RateLimitRule, metadata: {name: a}, spec: {tenant: t, route: r, capacity: 1, refillPerSecond: 1}}\n"))
	f.Add([]byte(`{"apiVersion":"ratelimit.tollgate.dev/v1alpha1","kind":"RateLimitRuleList","items":[{"metadata":{"name":"x"},"spec":{"tenant":"t","route":"*","capacity":5,"refill":{"tokens":1,"period":"1s"}}}]}`))
	f.Add([]byte("--- # c\n...\n---\n&a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := parseManifests("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.obj.Name == "" || m.obj.Namespace == "" {
				t.Fatalf("%s: accepted without name or namespace", m.loc)
			}
		}
		c, err := compileManifests(ms, time.Now())
		if err != nil {
			return
		}
		rules := c.rules
		seen := map[[2]string]bool{}
		for i := range rules {
			if err := rules[i].Validate(); err != nil {
				t.Fatalf("accepted an invalid rule %+v: %v", rules[i], err)
			}
			if rules[i].RefillPeriodMs%1000 != 0 {
				t.Fatalf("accepted a period of %dms", rules[i].RefillPeriodMs)
			}
			k := [2]string{rules[i].Tenant, rules[i].Route}
			if seen[k] {
				t.Fatalf("two rules for %v", k)
			}
			seen[k] = true
		}
		set := snapshot.Build(rules, 1)
		if set.Len() != len(rules) {
			t.Fatalf("snapshot has %d rules, want %d", set.Len(), len(rules))
		}
	})
}

// BenchmarkLoadFiles measures parsing and compiling a file of 1,000 rules.
func BenchmarkLoadFiles(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		sb.WriteString("---\n" + doc(fmt.Sprintf("r-%d", i), fmt.Sprintf("tenant: t-%d\nroute: '*'\ncapacity: 10\nrefill: {tokens: 5, period: 1m}", i)))
	}
	files := []ruleFile{{name: "rules.yaml", data: []byte(sb.String())}}
	b.SetBytes(int64(sb.Len()))
	for b.Loop() {
		c, err := loadFiles(files, time.Now())
		if err != nil || len(c.rules) != 1000 {
			b.Fatal(err)
		}
	}
}
