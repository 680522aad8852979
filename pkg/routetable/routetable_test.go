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
