package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// headerUpstream records the headers of every request it receives.
type headerUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newHeaderUpstream(t *testing.T) *headerUpstream {
	t.Helper()
	u := &headerUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(u.Close)
	return u
}

// last returns the headers of the last request received, and how many
// requests came.
func (u *headerUpstream) last() (http.Header, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil, 0
	}
	return u.seen[len(u.seen)-1], len(u.seen)
}

// sendHeaders sends GET url with the header pairs given (name, value, ...)
// and returns the status.
func sendHeaders(t *testing.T, url string, headers ...string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestUpstreamGetsTenantNotKey: the API key stays in the gateway. The
// upstream receives the tenant the key maps to in X-Tollgate-Tenant, never
// the key, and a client's own X-Tollgate-Tenant (spoofed, repeated, or
// named in Connection to drop the gateway's) never reaches it. A client's
// X-Forwarded-For and Forwarded are not passed on.
func TestUpstreamGetsTenantNotKey(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeaderUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	gw := start(t, keyedOptions(t, e, srv.Addr(), "key-of-shop-a"), testLogger(t))

	for _, tc := range []struct {
		name    string
		headers []string // sent besides the key
	}{
		{"no tenant header", nil},
		{"a spoofed tenant", []string{"X-Tollgate-Tenant", "shop-b"}},
		{"two spoofed tenants, lower case", []string{"x-tollgate-tenant", "shop-b", "x-tollgate-tenant", "shop-c"}},
		{"the tenant header named hop-by-hop", []string{"Connection", "X-Tollgate-Tenant", "X-Tollgate-Tenant", "shop-b"}},
		{"a spoofed X-Forwarded-For and Forwarded", []string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=203.0.113.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status := sendHeaders(t, gw.url+"/orders", append([]string{"X-Api-Key", "key-of-shop-a"}, tc.headers...)...); status != 200 {
				t.Fatalf("status %d, want 200", status)
			}
			h, _ := up.last()
			if got := h.Values("X-Api-Key"); len(got) != 0 {
				t.Errorf("the upstream received X-Api-Key %q", got)
			}
			if got := h.Values("X-Tollgate-Tenant"); len(got) != 1 || got[0] != "shop-a" {
				t.Errorf("the upstream received X-Tollgate-Tenant %q, want [shop-a]", got)
			}
			// The gateway's peer address only: a client's X-Forwarded-For
			// is not passed on.
			if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
				t.Errorf("the upstream received X-Forwarded-For %q, want [127.0.0.1]", got)
			}
			if got := h.Values("Forwarded"); len(got) != 0 {
				t.Errorf("the upstream received Forwarded %q", got)
			}
		})
	}

	// Refused requests reach no upstream.
	_, before := up.last()
	for _, key := range []string{"", "unknown-key", "key of shop-a"} {
		headers := []string{"X-Tollgate-Tenant", "shop-a"}
		if key != "" {
			headers = append(headers, "X-Api-Key", key)
		}
		if status := sendHeaders(t, gw.url+"/orders", headers...); status != 401 && status != 400 {
			t.Fatalf("key %q with a spoofed tenant: status %d, want 401 or 400", key, status)
		}
	}
	if _, after := up.last(); after != before {
		t.Fatalf("%d refused requests reached the upstream", after-before)
	}
}

// TestTenantHeaderFlag: --tenant-header renames the header the gateway
// owns (a client's copy of the new name is removed; the default name is
// then an ordinary header), and names the gateway cannot own are refused.
func TestTenantHeaderFlag(t *testing.T) {
	srv := redistest.Start(t)
	up := newHeaderUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	o := e.options(srv.Addr())
	o.TenantHeader = "x-shop-tenant"
	gw := start(t, o, testLogger(t))
	if status := sendHeaders(t, gw.url+"/orders", "X-Api-Key", "shop-a", "X-Shop-Tenant", "shop-b", "X-Tollgate-Tenant", "anything"); status != 200 {
		t.Fatalf("status %d, want 200", status)
	}
	h, _ := up.last()
	for name, want := range map[string]string{"X-Shop-Tenant": "shop-a", "X-Tollgate-Tenant": "anything", "X-Api-Key": ""} {
		if got := strings.Join(h.Values(name), ","); got != want {
			t.Errorf("the upstream received %s %q, want %q", name, got, want)
		}
	}

	for name, want := range map[string]string{
		"":                  `"" is not a valid header name`,
		"X Tenant":          `"X Tenant" is not a valid header name`,
		"x-api-key":         "the API key header, which is never forwarded",
		"Connection":        "a header HTTP or the proxy sets itself",
		"X-Forwarded-For":   "a header HTTP or the proxy sets itself",
		"X-Tollgate-Tenant": "",
	} {
		o := e.options(srv.Addr())
		o.TenantHeader = name
		err := o.Validate()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), "--tenant-header: ") || !strings.Contains(err.Error(), want)) {
			t.Errorf("--tenant-header %q: %v, want %q", name, err, want)
		}
	}
}
