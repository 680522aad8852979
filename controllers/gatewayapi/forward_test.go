package gatewayapi

import (
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// TestForwardAuthorizationAnnotation: the HTTPRoute annotation "true"
// marks all its rules; any other value, or none, leaves them unmarked.
func TestForwardAuthorizationAnnotation(t *testing.T) {
	now := time.Now()
	on := hr("team", "on", now, nil, testRule{prefix("/a"), "a"}, testRule{prefix("/b"), "b"})
	on.Annotations = map[string]string{routetable.AnnotationForwardAuthorization: "true"}
	other := hr("team", "other", now, nil, testRule{prefix("/c"), "c"})
	other.Annotations = map[string]string{routetable.AnnotationForwardAuthorization: "yes"}
	none := hr("team", "none", now, nil, testRule{prefix("/d"), "d"})
	in, _ := precedenceInput(append(append(append([]gwv1.HTTPRoute{}, on), other), none))
	out := Translate(in)
	got := map[string]bool{}
	for _, r := range out.Table.Rules {
		got[r.Route] = got[r.Route] || r.ForwardAuthorization
		if r.Route == "team/on" && !r.ForwardAuthorization {
			t.Errorf("rule %s of the annotated route does not forward", r.ID)
		}
	}
	if !got["team/on"] || got["team/other"] || got["team/none"] || len(out.Table.Rules) != 4 {
		t.Errorf("forwarding by route %v over %d rules, want only team/on", got, len(out.Table.Rules))
	}
}
