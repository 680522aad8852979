package gateway_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/tollgate-dev/tollgate/dataplane/admintoken"
	"github.com/tollgate-dev/tollgate/dataplane/reset"
	"github.com/tollgate-dev/tollgate/dataplane/top"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

const (
	tokenA = "oncall-token-0123456789abcdef"
	tokenB = "rotated-token-fedcba9876543210"
)

// admin sends one request to the gateway's admin listener with the bearer
// token (none when ""), and returns the status and body.
func admin(t *testing.T, gw *running, method, pathQuery, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+gw.AdminAddr()+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

// logBuffer is a logger that keeps what it logs.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { l.mu.Lock(); l.b.WriteString(prefix + " " + args + "\n"); l.mu.Unlock() }, funcr.Options{})
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestAdminMutationsNeedAToken: without --admin-token-file mutations are
// off (403, saying so); with it, no token and a wrong token get 401 before
// any parameter is looked at, the right one passes, bad parameters get 400
// naming the field, the file rotates live, and neither the logs nor the
// answers hold a token.
func TestAdminMutationsNeedAToken(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("acme", "acme", "create-order", 10, slow))
	off := start(t, e.options(srv.Addr()), testLogger(t))
	res, body := admin(t, off, "POST", "/debug/reset?tenant=acme&route=create-order", tokenA)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "mutations are off: this gateway runs without --admin-token-file") {
		t.Fatalf("without a token file: %d %s", res.StatusCode, body)
	}
	if v := metricValue(t, off, `tollgate_gateway_admin_mutations_total{action="reset",result="disabled"}`); v != 1 {
		t.Errorf("disabled mutations counted %v, want 1", v)
	}

	tokens := e.dir + "/admin-tokens"
	writeAtomic(t, tokens, "# the on-call rotation\noncall "+tokenA+"\n")
	o := e.options(srv.Addr())
	o.AdminTokenFile = tokens
	var logs logBuffer
	gw := start(t, o, logs.logger())
	for _, c := range []struct {
		name, method, query, token string
		status                     int
		want                       string
	}{
		{"GET", "GET", "tenant=acme&route=create-order", tokenA, 405, "use POST"},
		{"no token", "POST", "tenant=acme&route=create-order", "", 401, "a bearer token is required"},
		{"a wrong token", "POST", "tenant=acme&route=create-order", tokenB, 401, "not one of --admin-token-file's"},
		{"a bad parameter without a token", "POST", "tenant=a{b}&route=create-order", "", 401, "a bearer token is required"},
		{"no tenant", "POST", "route=create-order", tokenA, 400, "tenant: required"},
		{"a bad tenant", "POST", "tenant=a{b}&route=create-order", tokenA, 400, "tenant:"},
		{"an unknown parameter", "POST", "tenant=acme&route=create-order&key=sk-123", tokenA, 400, "key: unknown parameter"},
		{"tokens not a number", "POST", "tenant=acme&route=create-order&tokens=lots", tokenA, 400, "tokens: want a whole number"},
		{"negative tokens", "POST", "tenant=acme&route=create-order&tokens=-1", tokenA, 400, "tokens: want a whole number"},
		{"tokens twice", "POST", "tenant=acme&route=create-order&tokens=1&tokens=2", tokenA, 400, "tokens: given 2 times"},
		{"tokens above the capacity", "POST", "tenant=acme&route=create-order&tokens=11", tokenA, 400, "tokens: 11 is more than the capacity 10 of the rule in force (default/acme)"},
		{"an unknown part", "POST", "tenant=acme&route=create-order&part=all", tokenA, 400, "part: want bucket or quota"},
		{"a quota the rule does not have", "POST", "tenant=acme&route=create-order&part=quota", tokenA, 400, "part: the rule in force (default/acme) has no spec.quota"},
		{"forget takes no tokens", "POST", "tenant=acme&route=create-order&tokens=1", tokenA, 400, "tokens: unknown parameter"},
		{"the right token", "POST", "tenant=acme&route=create-order&tokens=4", tokenA, 200, `"who": "oncall"`},
	} {
		path := "/debug/reset?"
		if strings.HasPrefix(c.name, "forget") {
			path = "/debug/forget?"
		}
		res, body := admin(t, gw, c.method, path+c.query, c.token)
		if res.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d and %q", c.name, res.StatusCode, body, c.status, c.want)
		}
		if c.status == 401 && res.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
		if strings.Contains(body, tokenA) || strings.Contains(body, tokenB) {
			t.Errorf("%s: the answer quotes a token", c.name)
		}
	}

	// Rotating the token file: the old token is refused, the new one
	// (unnamed: its fingerprint) accepted.
	writeAtomic(t, tokens, tokenB+"\n")
	waitFor(t, 10*time.Second, "the old token to be refused", func() bool {
		res, _ := admin(t, gw, "POST", "/debug/forget?tenant=acme&route=create-order", tokenA)
		return res.StatusCode == http.StatusUnauthorized
	})
	res, body = admin(t, gw, "POST", "/debug/forget?tenant=acme&route=create-order", tokenB)
	if res.StatusCode != 200 || !strings.Contains(body, admintoken.Fingerprint(tokenB)) {
		t.Errorf("the new token: %d %s", res.StatusCode, body)
	}
	writeAtomic(t, tokens, "tooshort\n")
	waitFor(t, 10*time.Second, "the bad token file to be counted", func() bool {
		return metricValue(t, gw, `tollgate_gateway_reload_errors_total{source="admin-token"}`) == 1
	})
	if res, _ := admin(t, gw, "POST", "/debug/forget?tenant=acme&route=create-order", tokenB); res.StatusCode != 200 {
		t.Errorf("a bad token file must keep the last good tokens: %d", res.StatusCode)
	}

	for series, want := range map[string]float64{
		`tollgate_gateway_admin_mutations_total{action="reset",result="ok"}`:      1,
		`tollgate_gateway_admin_mutations_total{action="reset",result="denied"}`:  3,
		`tollgate_gateway_admin_mutations_total{action="reset",result="invalid"}`: 9,
		`tollgate_gateway_admin_mutations_total{action="forget",result="ok"}`:     2,
	} {
		// Denied resets and forgets: at least those above (the wait for the
		// rotation adds some).
		if v := metricValue(t, gw, series); v < want || (strings.Contains(series, `action="reset",result="ok"`) || strings.Contains(series, "invalid")) && v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	text := logs.String()
	if strings.Contains(text, tokenA) || strings.Contains(text, tokenB) {
		t.Errorf("a token is in the logs:\n%s", text)
	}
	for _, want := range []string{`"who"="oncall"`, `"tenant"="acme"`, `"tokens"="4"`, `"before"=10`, `"after"=4`, `"who"="` + admintoken.Fingerprint(tokenB) + `"`} {
		if !strings.Contains(text, want) {
			t.Errorf("the logs lack %s:\n%s", want, text)
		}
	}
}

// TestResetRefillsAnEmptyBucket: a drained bucket (that this gateway has
// cached as empty) is set back to full and to N tokens, and exactly that
// many requests pass next; a quota's period count likewise.
func TestResetRefillsAnEmptyBucket(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("acme", "acme", "create-order", 5, slow)+
		rule("quota", "quota", "create-order", 1000, "refillPerSecond: 1000", "quota: {limit: 3, period: Day}"))
	writeAtomic(t, e.dir+"/tokens", tokenA+"\n")
	o := e.options(srv.Addr())
	o.AdminTokenFile = e.dir + "/tokens"
	gw := start(t, o, testLogger(t))
	admitted := func(tenant string, n int) int {
		got := 0
		for range n {
			if res, _ := send(t, "POST", gw.url+"/orders", tenant); res.StatusCode == 200 {
				got++
			}
		}
		return got
	}
	resetTo := func(query string) reset.Answer {
		t.Helper()
		res, body := admin(t, gw, "POST", "/debug/reset?"+query, tokenA)
		var a reset.Answer
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &a) != nil {
			t.Fatalf("reset %s: %d %s", query, res.StatusCode, body)
		}
		return a
	}
	if got := admitted("acme", 8); got != 5 {
		t.Fatalf("admitted %d of a bucket of 5", got)
	}
	a := resetTo("tenant=acme&route=create-order")
	if a.Before > 0.001 || a.After != 5 || len(a.Keys) != 1 || a.Keys[0].Key != "rl:{acme}:create-order" {
		t.Errorf("reset to full: %+v", a)
	}
	if got := admitted("acme", 8); got != 5 {
		t.Errorf("after a reset to full: admitted %d, want 5 (the gateway had cached the bucket as empty)", got)
	}
	a = resetTo("tenant=acme&route=create-order&tokens=2")
	if a.After != 2 {
		t.Errorf("reset to 2: %+v", a)
	}
	if got := admitted("acme", 5); got != 2 {
		t.Errorf("after a reset to 2: admitted %d", got)
	}

	if got := admitted("quota", 5); got != 3 {
		t.Fatalf("admitted %d of a quota of 3", got)
	}
	a = resetTo("tenant=quota&route=create-order&part=quota&tokens=1")
	if a.Part != reset.PartQuota || a.Before > 0.001 || a.After != 1 || a.Capacity != 3 {
		t.Errorf("quota reset to 1: %+v", a)
	}
	if got := admitted("quota", 3); got != 1 {
		t.Errorf("after a quota reset to 1: admitted %d", got)
	}
	resetTo("tenant=quota&route=create-order&part=quota")
	if got := admitted("quota", 5); got != 3 {
		t.Errorf("after a quota reset to full: admitted %d", got)
	}
}

// TestTopEndpoint: /debug/top lists the pairs refused most with the rule
// in force, and tollgate_gateway_refused_tenants counts the distinct
// tenants refused, with no tenant label.
func TestTopEndpoint(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("small", "*", "create-order", 1, slow))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	for tenant, n := range map[string]int{"hot": 9, "warm": 4, "cold": 2} {
		for range n {
			send(t, "POST", gw.url+"/orders", tenant)
		}
	}
	res, body := admin(t, gw, "GET", "/debug/top?limit=2", "")
	var r top.Report
	if res.StatusCode != 200 || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("/debug/top: %d %s", res.StatusCode, body)
	}
	if r.Rejections != 12 || r.Admissions != 3 || len(r.Entries) != 2 || r.Floor != 1 {
		t.Fatalf("/debug/top: %+v", r)
	}
	hot := r.Entries[0]
	// Its one admission came before it was tracked: admissions are a
	// lower bound.
	if hot.Tenant != "hot" || hot.Route != "create-order" || hot.Rejections != 8 || hot.Error != 0 || hot.Admissions != 0 ||
		hot.Rule == nil || *hot.Rule != (top.Rule{Source: "default/small", Tenant: "*", Route: "create-order", Capacity: 1, Rate: "1/168h"}) {
		t.Errorf("the top pair: %+v %+v", hot, hot.Rule)
	}
	if v := metricValue(t, gw, "tollgate_gateway_refused_tenants"); math.Round(v) != 3 {
		t.Errorf("tollgate_gateway_refused_tenants = %v, want 3", v)
	}
	if strings.Contains(scrape(t, gw), `tenant="`) {
		t.Error("a metric carries a tenant label")
	}
	for q, want := range map[string]int{"limit=0": 400, "limit=x": 400, "top=3": 400} {
		if res, _ := admin(t, gw, "GET", "/debug/top?"+q, ""); res.StatusCode != want {
			t.Errorf("/debug/top?%s: %d, want %d", q, res.StatusCode, want)
		}
	}
	if res, _ := admin(t, gw, "POST", "/debug/top", ""); res.StatusCode != 405 {
		t.Errorf("POST /debug/top: %d", res.StatusCode)
	}
}

// TestBoostExpiryKeepsTokens: a boost read from files expires live, and
// the bucket keeps its tokens across the change (capped at the capacity
// now in force), as at any rule change: it does not come back full.
func TestBoostExpiryKeepsTokens(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	expires := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	e := newEnv(t, up.URL, rule("default", "*", "*", 20, slow)+rule("boost", "shop-a", "*", 10, slow, "expiresAt: "+expires))
	gw := start(t, e.options(srv.Addr()), testLogger(t))
	for i := range 7 {
		if res, _ := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit") != "10" {
			t.Fatalf("request %d under the boost: %d, limit %s", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
		}
	}
	waitFor(t, 10*time.Second, "the boost to expire", func() bool { return gw.Rules().Lookup("shop-a", "create-order").Capacity == 20 })
	got := 0
	for range 6 {
		res, _ := send(t, "POST", gw.url+"/orders", "shop-a")
		if res.StatusCode == 200 {
			got++
		}
		if l := res.Header.Get("X-RateLimit-Limit"); l != "20" {
			t.Errorf("after the expiry: limit %s, want the default's 20", l)
		}
	}
	if got != 3 {
		t.Errorf("after the expiry %d passed, want the 3 tokens the bucket kept", got)
	}
}
