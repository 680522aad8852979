package gateway_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// gzipUpstream records the Accept-Encoding of each request and answers a
// JSON body that reports 7 tokens of usage, gzip-compressed when the
// request accepts gzip (or, at /v1/always-gzip, whatever it accepts).
type gzipUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	accepted []string
}

func newGzipUpstream(t *testing.T) *gzipUpstream {
	t.Helper()
	u := &gzipUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ae := strings.Join(r.Header.Values("Accept-Encoding"), ", ")
		u.mu.Lock()
		u.accepted = append(u.accepted, ae)
		u.mu.Unlock()
		body := []byte(`{"id":"c-1","usage":{"prompt_tokens":3,"total_tokens":7}}`)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(ae, "gzip") || r.URL.Path == "/v1/always-gzip" {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = b.Bytes()
			w.Header().Set("Content-Encoding", "gzip")
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(u.Close)
	return u
}

// lastAccepted is the Accept-Encoding of the last request, "" for none.
func (u *gzipUpstream) lastAccepted() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.accepted[len(u.accepted)-1]
}

// tokensOr is what tenant's bucket on route api holds: capacity before the
// first request.
func tokensOr(t *testing.T, srv *redistest.Server, tenant string, capacity float64) float64 {
	t.Helper()
	st, err := limiter.Peek(context.Background(), srv.Client(t), limiter.Key(tenant, "api"))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Found {
		return capacity
	}
	return st.Tokens
}

// rawClient shows the client what the gateway sent: it neither asks for
// gzip on its own nor decompresses.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// TestAcceptEncodingToUpstream: on a route whose rule reads the response
// cost from the body, the upstream is asked for an uncompressed body
// (Accept-Encoding: identity) whatever the client accepts; elsewhere it
// receives the client's Accept-Encoding as sent, none included. The
// upstream's answer reaches the client as it was sent: Content-Encoding
// is there exactly when the body is compressed.
func TestAcceptEncodingToUpstream(t *testing.T) {
	srv := redistest.Start(t)
	up := newGzipUpstream(t)
	e := newEnv(t, up.URL, rule("any", "*", "*", 100000, slow)+
		rule("json", "json", "api", 100000, slow, "cost: {response: {jsonField: usage.total_tokens}}")+
		rule("hdr", "hdr", "api", 100000, slow, "cost: {response: {header: X-Usage-Tokens}}"))
	gw := start(t, e.options(srv.Addr()), testLogger(t))

	for _, tc := range []struct {
		tenant, path  string
		clientAccepts string // "" sends no Accept-Encoding
		upstreamGets  string // "" means none
		compressed    bool   // the client receives a gzip body
		tokensCharged float64
	}{
		{"json", "json", "gzip", "identity", false, 1 + 7},
		{"json", "json", "", "identity", false, 1 + 7},
		{"json", "json", "br;q=1.0, gzip;q=0.8", "identity", false, 1 + 7},
		// An upstream that compresses all the same: passed on as it is
		// (its usage cannot be read: the rule's default, 0, is charged).
		{"json", "always-gzip", "", "identity", true, 1},
		{"hdr", "json", "gzip", "gzip", true, 1},
		{"walk-in", "json", "gzip", "gzip", true, 1},
		{"walk-in", "json", "", "", false, 1},
		{"walk-in", "json", "identity", "identity", false, 1},
	} {
		name := tc.tenant + " " + tc.path + " accepting " + tc.clientAccepts
		t.Run(name, func(t *testing.T) {
			before := tokensOr(t, srv, tc.tenant, 100000)
			req, err := http.NewRequest("GET", gw.url+"/api/"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Api-Key", tc.tenant)
			if tc.clientAccepts != "" {
				req.Header.Set("Accept-Encoding", tc.clientAccepts)
			}
			res, err := rawClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d: %q", res.StatusCode, body)
			}
			if got := up.lastAccepted(); got != tc.upstreamGets {
				t.Errorf("the upstream received Accept-Encoding %q, want %q", got, tc.upstreamGets)
			}
			gzipped := bytes.HasPrefix(body, []byte{0x1f, 0x8b})
			ce := res.Header.Get("Content-Encoding")
			if gzipped != tc.compressed || (ce == "gzip") != gzipped || (ce != "" && ce != "gzip") {
				t.Errorf("the client got Content-Encoding %q and a body that is gzip: %v (%q); want compressed: %v", ce, gzipped, body, tc.compressed)
			}
			if charged := before - tokens(t, srv, tc.tenant, "api"); charged < tc.tokensCharged-0.01 || charged > tc.tokensCharged+0.01 {
				t.Errorf("%v tokens charged, want %v", charged, tc.tokensCharged)
			}
		})
	}
}
