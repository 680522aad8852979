package httproutes

import (
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// TestRewritePath: ReplacePrefixMatch replaces the matched prefix (segment
// by segment, as the Gateway API conformance cases do) and ReplaceFullPath
// the whole path.
func TestRewritePath(t *testing.T) {
	prefix := func(p string) *routetable.Match {
		return &routetable.Match{PathType: routetable.PathPrefix, PathValue: p}
	}
	full := &routetable.Filter{PathType: routetable.ReplaceFullPath, PathValue: "/full"}
	repl := func(v string) *routetable.Filter {
		return &routetable.Filter{PathType: routetable.ReplacePrefixMatch, PathValue: v}
	}
	for _, c := range []struct {
		path  string
		match *routetable.Match
		f     *routetable.Filter
		want  string
	}{
		{"/prefix/one/two", prefix("/prefix/one"), repl("/one"), "/one/two"},
		{"/prefix/one/two", prefix("/prefix/one"), repl("/"), "/two"},
		{"/prefix/one", prefix("/prefix/one"), repl("/"), "/"},
		{"/prefix/one/", prefix("/prefix/one"), repl("/"), "/"},
		{"/prefix/one", prefix("/prefix/one"), repl("/one"), "/one"},
		{"/prefix/one/", prefix("/prefix/one"), repl("/one"), "/one/"},
		{"/old/x", prefix("/old"), repl("/new/"), "/new/x"},
		{"/x/y", prefix("/"), repl("/api"), "/api/x/y"},
		{"/anything/at/all", prefix("/anything"), full, "/full"},
		{"/x", &routetable.Match{PathType: routetable.PathExact, PathValue: "/x"}, repl("/y"), "/x"},
	} {
		if got := rewritePath(c.path, c.f, c.match); got != c.want {
			t.Errorf("%s with prefix %s, %s %q: got %q, want %q", c.path, c.match.PathValue, c.f.PathType, c.f.PathValue, got, c.want)
		}
	}
}
