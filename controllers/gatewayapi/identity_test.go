package gatewayapi

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// TestIdentityAnnotation: optional and none mark every rule of their
// HTTPRoute, required and no annotation leave them required (""), and
// another value refuses the route, naming the annotation.
func TestIdentityAnnotation(t *testing.T) {
	now := time.Now()
	var routes []gwv1.HTTPRoute
	for i, v := range []string{"none", "optional", "required", "", "anonymous"} {
		rt := hr("team", []string{"none", "optional", "required", "unset", "bad"}[i], now, nil, testRule{prefix("/" + string(rune('a'+i))), "r"})
		if v != "" {
			rt.Annotations = map[string]string{routetable.AnnotationIdentity: v}
		}
		routes = append(routes, rt)
	}
	in, _ := precedenceInput(routes)
	out := Translate(in)
	got := map[string]string{}
	for _, r := range out.Table.Rules {
		got[r.Route] = r.IdentityMode
	}
	want := map[string]string{"team/none": "none", "team/optional": "optional", "team/required": "", "team/unset": ""}
	if len(got) != len(want) {
		t.Fatalf("rules of %v, want %v (team/bad refused)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: identity %q, want %q", k, got[k], v)
		}
	}
	v := out.routes[types.NamespacedName{Namespace: "team", Name: "bad"}]
	found := false
	for _, p := range v.parents {
		for _, c := range p.Conditions {
			if c.Type == "Accepted" && c.Reason == string(gwv1.RouteReasonUnsupportedValue) && strings.Contains(c.Message, routetable.AnnotationIdentity) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("team/bad: %+v, want Accepted=False UnsupportedValue naming the annotation", v)
	}
}
