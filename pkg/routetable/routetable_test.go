package routetable

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

func TestRuleID(t *testing.T) {
	for _, c := range []struct {
		ns, name, section string
		index             int
		want              string
	}{
		{"shop", "orders", "create", 0, "shop_orders_create"},
		{"shop", "orders", "", 2, "shop_orders__2"},
		// '_' is in no part, so a name with dots cannot pass for a section.
		{"shop", "orders.v2", "x", 0, "shop_orders.v2_x"},
		{"shop", "orders", "v2.x", 0, "shop_orders_v2.x"},
	} {
		if got := RuleID(c.ns, c.name, c.section, c.index); got != c.want {
			t.Errorf("RuleID(%q, %q, %q, %d) = %q, want %q", c.ns, c.name, c.section, c.index, got, c.want)
		}
	}
	long := RuleID("team-"+strings.Repeat("a", 50), strings.Repeat("r", 200), "rule", 0)
	other := RuleID("team-"+strings.Repeat("a", 50), strings.Repeat("r", 200), "rule2", 0)
	if !v1alpha1.ValidIdentifier(long) || long == other {
		t.Errorf("long ids %q and %q: want valid and distinct", long, other)
	}
}

func TestConfigMapRoundTrip(t *testing.T) {
	tab := &Table{Rules: []Rule{{
		ID: "shop_orders_create", Route: "shop/orders", Created: 1, Hostnames: []string{"shop.example.com"},
		Matches:  []Match{{PathType: PathPrefix, PathValue: "/orders", Method: "POST", Headers: []NameValue{{"x-a", "1"}}}},
		Filters:  []Filter{{Type: FilterRequestHeaderModifier, Set: []NameValue{{"X-Env", "test"}}}},
		Backends: []Backend{{Name: "shop/echo:8080", Weight: 1, Endpoints: []string{"10.0.0.1:8080"}}},
	}}}
	cm, err := tab.ConfigMap("tollgate-system", DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Rules) != fmt.Sprint(tab.Rules) {
		t.Errorf("round trip: got %+v, want %+v", got.Rules, tab.Rules)
	}

	bad := cm.DeepCopy()
	bad.Annotations[AnnotationChecksum] = strings.Repeat("0", 64)
	if _, err := FromConfigMap(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a wrong checksum: err %v, want a checksum error", err)
	}
	bad = cm.DeepCopy()
	bad.BinaryData[DataKey] = []byte("not gzip")
	if _, err := FromConfigMap(bad); err == nil {
		t.Error("a payload that is not gzip was accepted")
	}
	invalid := &Table{Rules: []Rule{{ID: "bad id with spaces", Matches: []Match{{PathType: PathExact, PathValue: "/"}}}}}
	if cm, err := invalid.ConfigMap("ns", "n"); err != nil {
		t.Fatal(err)
	} else if _, err := FromConfigMap(cm); err == nil || !strings.Contains(err.Error(), "rules[0]") {
		t.Errorf("an invalid id: err %v, want one naming rules[0]", err)
	}
}

// TestConfigMapTooLarge: a table that does not fit one ConfigMap is an
// ErrTooLarge (the controller reports it in the Gateways' Programmed
// condition), not a ConfigMap the API server would refuse.
func TestConfigMapTooLarge(t *testing.T) {
	tab := &Table{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 8_000 {
		// Random names defeat compression: 8,000 x 256 random bytes.
		name := make([]byte, 128)
		for j := range name {
			name[j] = byte(rng.Uint32())
		}
		tab.Rules = append(tab.Rules, Rule{ID: fmt.Sprintf("r%d", i), Route: hex.EncodeToString(name),
			Matches: []Match{{PathType: PathPrefix, PathValue: "/"}}})
	}
	if _, err := tab.ConfigMap("ns", "n"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("8,000 incompressible rules: err %v, want ErrTooLarge", err)
	}
}

// TestGRPCRuleID: a GRPCRoute's rule ids never equal an HTTPRoute's, of
// whatever names: "grpc" as a namespace and the other parts shifted cannot
// make one from the other.
func TestGRPCRuleID(t *testing.T) {
	if got := GRPCRuleID("shop", "echo", "unary", 0); got != "grpc_shop_echo_unary" {
		t.Errorf("named: %q", got)
	}
	if got := GRPCRuleID("shop", "echo", "", 1); got != "grpc_shop_echo__1" {
		t.Errorf("unnamed: %q", got)
	}
	http := map[string]bool{}
	parts := []string{"grpc", "shop", "echo", "unary", "x"}
	for _, ns := range parts {
		for _, name := range parts {
			for _, sec := range append(parts, "") {
				http[RuleID(ns, name, sec, 0)] = true
			}
		}
	}
	for _, ns := range parts {
		for _, name := range parts {
			for _, sec := range append(parts, "") {
				if id := GRPCRuleID(ns, name, sec, 0); http[id] || !v1alpha1.ValidIdentifier(id) {
					t.Errorf("GRPCRuleID(%q, %q, %q) = %q: an HTTPRoute id too, or not valid", ns, name, sec, id)
				}
			}
		}
	}
	long := GRPCRuleID("team-"+strings.Repeat("a", 50), strings.Repeat("r", 200), "rule", 0)
	if !v1alpha1.ValidIdentifier(long) || long == RuleID("team-"+strings.Repeat("a", 50), strings.Repeat("r", 200), "rule", 0) {
		t.Errorf("a long GRPCRoute id %q", long)
	}
}

// TestValidateGRPC: a GRPCRoute's rule matches by service and method, an
// HTTPRoute's by path; neither takes the other's fields, and a backend
// speaks HTTP/1.1 or h2c.
func TestValidateGRPC(t *testing.T) {
	good := Rule{ID: "grpc_shop_echo__0", GRPC: true, Matches: []Match{{GRPCService: "grpc.testing.TestService", GRPCMethod: "UnaryCall"}, {}},
		Backends: []Backend{{Name: "shop/echo:50051", Weight: 1, Protocol: ProtocolH2C}}}
	if err := (&Table{Rules: []Rule{good}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(r *Rule){
		"a path in a gRPC match":   func(r *Rule) { r.Matches[0].PathType, r.Matches[0].PathValue = PathPrefix, "/" },
		"a method in a gRPC match": func(r *Rule) { r.Matches[0].Method = "POST" },
		"a slash in a service":     func(r *Rule) { r.Matches[0].GRPCService = "a/b" },
		"a gRPC match in HTTP":     func(r *Rule) { r.GRPC = false },
		"an unknown protocol":      func(r *Rule) { r.Backends[0].Protocol = "h3" },
	} {
		r := good
		r.Matches = append([]Match(nil), good.Matches...)
		r.Backends = append([]Backend(nil), good.Backends...)
		mutate(&r)
		if err := (&Table{Rules: []Rule{r}}).Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
