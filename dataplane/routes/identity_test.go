package routes

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/routing"
)

// TestIdentityField: identity is required by default, optional and none
// parse, another value is an error naming the route and the field, and the
// file form keeps it.
func TestIdentityField(t *testing.T) {
	table, err := Parse([]byte(`routes:
  - {id: orders, path: /orders, upstream: "http://127.0.0.1:1"}
  - {id: signup, path: /signup, upstream: "http://127.0.0.1:1", identity: optional}
  - {id: login, path: /login, upstream: "http://127.0.0.1:1", identity: none}
  - {id: explicit, path: /x, upstream: "http://127.0.0.1:1", identity: required}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]routing.Identity{"orders": routing.IdentityRequired, "signup": routing.IdentityOptional, "login": routing.IdentityNone, "explicit": routing.IdentityRequired}
	for _, r := range table.Routes() {
		if r.Identity() != want[r.ID] {
			t.Errorf("%s: identity %v, want %v", r.ID, r.Identity(), want[r.ID])
		}
		b, _ := r.MarshalJSON()
		if (want[r.ID] == routing.IdentityNone) != strings.Contains(string(b), `"identity":"none"`) {
			t.Errorf("%s: file form %s", r.ID, b)
		}
	}
	_, err = Parse([]byte("routes:\n  - {id: login, path: /login, upstream: \"http://127.0.0.1:1\", identity: anonymous}\n"))
	if err == nil || !strings.Contains(err.Error(), "login") || !strings.Contains(err.Error(), "identity: must be required, optional or none") {
		t.Errorf("a bad identity: %v", err)
	}
}
