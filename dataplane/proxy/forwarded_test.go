package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/dataplane/decision"
	"github.com/tollgate-dev/tollgate/dataplane/httproutes"
	"github.com/tollgate-dev/tollgate/dataplane/identity"
	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/dataplane/metrics"
	"github.com/tollgate-dev/tollgate/dataplane/proxy"
	"github.com/tollgate-dev/tollgate/dataplane/routing"
	"github.com/tollgate-dev/tollgate/dataplane/rules"
	"github.com/tollgate-dev/tollgate/pkg/routetable"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// recordingUpstream is a real HTTP server that keeps the headers of the
// last request it received.
type recordingUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	last http.Header
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *recordingUpstream) headers() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// localEngine decides with local buckets under a generous default rule.
func localEngine() *decision.Engine {
	store := rules.NewStore(snapshot.Rule{Tenant: "*", Route: "*", Capacity: 1 << 20, RefillTokens: 1 << 20, RefillPeriodMs: 1000})
	return decision.New(decision.Options{Rules: store, Limiter: limiter.NewLocal(limiter.LocalOptions{})})
}

// TestGatewayAPIForwardsTenantNotKey: in Gateway API mode, over HTTP and
// over TLS, an HTTPRoute backend receives the tenant in X-Tollgate-Tenant
// and never the API key, whatever the client sends and whatever the rule's
// RequestHeaderModifier sets, adds or removes; the filter still applies to
// other headers.
func TestGatewayAPIForwardsTenantNotKey(t *testing.T) {
	up := newRecordingUpstream(t)
	endpoint := strings.TrimPrefix(up.URL, "http://")
	modifier := routetable.Filter{Type: routetable.FilterRequestHeaderModifier,
		Set:    []routetable.NameValue{{Name: "X-Tollgate-Tenant", Value: "set-by-route"}, {Name: "X-Env", Value: "test"}},
		Add:    []routetable.NameValue{{Name: "X-Api-Key", Value: "added-by-route"}},
		Remove: []string{"X-Remove"}}
	rule := func(id string, tls bool, filters ...routetable.Filter) routetable.Rule {
		return routetable.Rule{ID: id, Route: "shop/web", Matches: []routetable.Match{{PathType: routetable.PathPrefix, PathValue: "/"}},
			Filters: filters, TLS: tls, Backends: []routetable.Backend{{Name: "shop/web:8080", Weight: 1, Endpoints: []string{endpoint}}}}
	}
	table := httproutes.New(&routetable.Table{Rules: []routetable.Rule{
		rule("shop_web_plain", false, modifier), rule("shop_web_tls", true, modifier),
	}})
	h := proxy.New(proxy.Options{
		Router:   func() routing.Router { return table },
		Decider:  localEngine(),
		Identity: identity.Direct{},
		Metrics:  metrics.NewGateway(prometheus.NewRegistry()),
		Logger:   logr.Discard(),
	})
	t.Cleanup(h.Close)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(h)
	t.Cleanup(secure.Close)

	for _, srv := range []*httptest.Server{plain, secure} {
		req, err := http.NewRequest("GET", srv.URL+"/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Api-Key", "shop-a")
		req.Header.Add("X-Tollgate-Tenant", "shop-b")
		req.Header.Set("X-Remove", "yes")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: status %d, want 200", srv.URL, res.StatusCode)
		}
		got := up.headers()
		for name, want := range map[string][]string{
			"X-Api-Key":         nil,
			"X-Tollgate-Tenant": {"shop-a"},
			"X-Env":             {"test"},
			"X-Remove":          nil,
		} {
			if v := got.Values(name); strings.Join(v, ",") != strings.Join(want, ",") {
				t.Errorf("%s: the backend received %s %q, want %q", srv.URL, name, v, want)
			}
		}
	}
}
