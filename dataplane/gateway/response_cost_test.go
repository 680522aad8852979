package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// usageUpstream reports usage the way LLM APIs do, chosen by path
// (/v1/<mode>?u=<value>, reached through the route "api" at /api/<mode>):
//
//	header  X-Usage-Tokens: <u>
//	json    {"id":..,"usage":{"prompt_tokens":3,"total_tokens":<u>}}
//	sse     chunk events, then {"usage":{"total_tokens":<u>}}, then [DONE]
//	fail    500, with X-Usage-Tokens: <u> all the same
//	slow    as sse, after a wait before the response headers (hold)
//
// With hold=<name> an sse response stops after its first event until
// release(name) is called, or the gateway cancels the request: then
// canceled(name) is closed. After the hold, pad=<bytes> sends that many
// bytes of chunk events before the usage, and brk=1 breaks the response
// off instead of sending the usage.
type usageUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	holds    map[string]chan struct{}
	canceled map[string]chan struct{}
	// streams counts sse and slow responses in flight at the upstream.
	streams atomic.Int64
}

func newUsageUpstream(t *testing.T) *usageUpstream {
	u := &usageUpstream{holds: map[string]chan struct{}{}, canceled: map[string]chan struct{}{}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

// named returns the channel of name in chans, made on first use.
func (u *usageUpstream) named(chans map[string]chan struct{}, name string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if chans[name] == nil {
		chans[name] = make(chan struct{})
	}
	return chans[name]
}

func (u *usageUpstream) hold(name string) chan struct{} { return u.named(u.holds, name) }

func (u *usageUpstream) release(name string) { close(u.hold(name)) }

// cancellation is closed when the request held at name was canceled.
func (u *usageUpstream) cancellation(name string) chan struct{} { return u.named(u.canceled, name) }

// wasCanceled reports whether the request held at name was canceled.
func (u *usageUpstream) wasCanceled(name string) bool {
	select {
	case <-u.cancellation(name):
		return true
	default:
		return false
	}
}

// wait holds the request r at the hold it names, if any, until it is
// released (true) or r is canceled (false).
func (u *usageUpstream) wait(r *http.Request) bool {
	name := r.URL.Query().Get("hold")
	if name == "" {
		return true
	}
	select {
	case <-u.hold(name):
		return true
	case <-r.Context().Done():
		close(u.cancellation(name))
		return false
	}
}

func (u *usageUpstream) serve(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query().Get("u")
	switch strings.TrimPrefix(r.URL.Path, "/v1/") {
	case "header":
		w.Header().Set("X-Usage-Tokens", v)
		fmt.Fprintln(w, "ok")
	case "json":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c-1","choices":[{"text":"a \"usage\" {"}],"usage":{"prompt_tokens":3,"total_tokens":%s}}`, v)
	case "sse":
		u.streams.Add(1)
		defer u.streams.Add(-1)
		u.sse(w, r, v)
	case "fail":
		w.Header().Set("X-Usage-Tokens", v)
		w.WriteHeader(http.StatusInternalServerError)
	case "slow":
		u.streams.Add(1)
		defer u.streams.Add(-1)
		if u.wait(r) {
			u.rest(w, r, v)
		}
	default:
		http.NotFound(w, r)
	}
}

func (u *usageUpstream) sse(w http.ResponseWriter, r *http.Request, v string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n")
	w.(http.Flusher).Flush()
	if u.wait(r) {
		u.rest(w, r, v)
	}
}

// rest ends a stream: pad bytes of chunk events, then the usage and
// [DONE], or with brk=1 a broken-off body.
func (u *usageUpstream) rest(w http.ResponseWriter, r *http.Request, v string) {
	w.Header().Set("Content-Type", "text/event-stream")
	pad, _ := strconv.Atoi(r.URL.Query().Get("pad"))
	chunk := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("lo", 500) + "\"}}],\"usage\":null}\n\n"
	for sent := 0; sent < pad; sent += len(chunk) {
		if _, err := fmt.Fprint(w, chunk); err != nil {
			return
		}
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n")
	if r.URL.Query().Get("brk") == "1" {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the server closes the connection mid-body
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":%s}}\n\n", v)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// responseRules are rules on the route "api" for the tenants hdr, json and
// sse, each charging its response's cost its own way, with the capacity
// given and the slow refill.
func responseRules(capacity int64, extra string) string {
	return rule("hdr", "hdr", "api", capacity, slow, "cost: {response: {header: X-Usage-Tokens"+extra+"}}") +
		rule("json", "json", "api", capacity, slow, "cost: {response: {jsonField: usage.total_tokens"+extra+"}}") +
		rule("sse", "sse", "api", capacity, slow, "cost: {response: {jsonField: usage.total_tokens"+extra+"}}")
}

// get sends GET /api/<path> for tenant and reads the whole response.
func get(t *testing.T, gw *running, tenant, path string) (*http.Response, string) {
	t.Helper()
	return send(t, "GET", gw.url+"/api/"+path, tenant)
}

// TestResponseCostChargedExactly: usage reported in a header, a JSON body
// and the last event of a stream is charged exactly, on top of the one
// token each request takes up front, over three gateways.
func TestResponseCostChargedExactly(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	gws := costCluster(t, srv, up.URL, responseRules(100000, ""))
	for _, mode := range []string{"header", "json", "sse"} {
		tenant := map[string]string{"header": "hdr", "json": "json", "sse": "sse"}[mode]
		var sum int64
		for i := range 30 {
			n := int64(i * 37)
			res, body := get(t, gws[i%3], tenant, mode+"?u="+strconv.FormatInt(n, 10))
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d %s", mode, res.StatusCode, body)
			}
			sum += n
		}
		wantTokens(t, srv, tenant, "api", float64(100000-30-sum))
	}
}

// TestResponseCostDebt: a response that costs more than the bucket holds
// drives it into debt, cut at maxDebt (default: the capacity); the next
// request is rejected with a Retry-After that counts the debt.
func TestResponseCostDebt(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	rules := rule("debtor", "debtor", "api", 10, "refillPerSecond: 1", "cost: {response: {header: X-Usage-Tokens}}")
	gws := costCluster(t, srv, up.URL, rules)
	if res, _ := get(t, gws[0], "debtor", "header?u=25"); res.StatusCode != 200 {
		t.Fatalf("first request: %d", res.StatusCode)
	}
	// 10 - 1 = 9 held; 25 charged would leave -16: cut at -10.
	if got := tokens(t, srv, "debtor", "api"); got < -10 || got > -5 {
		t.Fatalf("after a charge of 25 on 9 tokens: %v tokens, want -10 (the debt floor) plus the refill since (1/s)", got)
	}
	res, _ := get(t, gws[1], "debtor", "header?u=1")
	retry, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != 429 || retry < 5 || retry > 11 {
		t.Fatalf("request with the bucket 10 in debt: %d Retry-After %q, want 429 and up to 11 s (11 tokens at 1/s; at least 5: the debt counts, whatever the machine's delays)", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// Why was I rate limited: the rule's cost, and the debt.
	r := explainOf(t, gws[2], "debtor", "api")
	if !strings.Contains(r.Rule.Cost, "header X-Usage-Tokens") || !strings.Contains(r.Rule.Cost, "down to -10 tokens") {
		t.Errorf("explained cost %q", r.Rule.Cost)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "in debt:") || r.Buckets[0].Redis.Tokens >= 0 {
		t.Errorf("explanation of a bucket in debt (%v):\n%s", err, text.String())
	}
}

// TestResponseCostStreams: the first event of a streamed response reaches
// the client while the upstream still holds the rest; the usage in the
// last event is charged once the stream ends.
func TestResponseCostStreams(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	gws := costCluster(t, srv, up.URL, responseRules(1000, ""))
	req, _ := http.NewRequest("GET", gws[0].url+"/api/sse?u=42&hold=first", nil)
	req.Header.Set("X-Api-Key", "sse")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "Hel") {
		t.Fatalf("first event: %q %v", line, err)
	}
	// The upstream holds the rest: nothing is charged yet but the up-front
	// token.
	wantTokens(t, srv, "sse", "api", 999)
	up.release("first")
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("rest of the stream: %q", rest)
	}
	wantTokens(t, srv, "sse", "api", 999-42)
}

// TestResponseCostBadUsage: what a response that reports no usable cost is
// charged (default 4, onError 2, max 50 in the rule): negative,
// non-numeric or missing usage costs the default; a huge one is cut at
// max; a 5xx costs onError, whatever it reports. (A client that goes away
// before the usage arrived: response_gone_test.go.)
func TestResponseCostBadUsage(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	gws := costCluster(t, srv, up.URL, responseRules(1000, ", default: 4, onError: 2, max: 50"))
	cases := []struct {
		tenant, path string
		want         float64 // charged, after the up-front token
	}{
		{"hdr", "header?u=-5", 4}, {"hdr", "header?u=abc", 4}, {"hdr", "header?u=", 4}, {"hdr", "header?u=1e30", 50},
		{"hdr", "header?u=" + strings.Repeat("9", 400), 50}, {"hdr", "header?u=7.2", 8}, {"hdr", "fail?u=30", 2},
		{"json", "json?u=%22twelve%22", 4}, {"json", "json?u=-3", 4}, {"json", "json?u=null", 4}, {"json", "json?u=1e400", 50},
		{"json", "other", 4}, // a 404 without the field: the default
		{"sse", "sse?u=%7B%7D", 4}, {"sse", "sse?u=12", 12},
	}
	for _, c := range cases {
		before := tokens0(t, srv, c.tenant)
		res, body := get(t, gws[0], c.tenant, c.path)
		if res.StatusCode >= 500 && !strings.HasPrefix(c.path, "fail") {
			t.Fatalf("%s: %d %s", c.path, res.StatusCode, body)
		}
		wantTokens(t, srv, c.tenant, "api", before-1-c.want)
	}
	for _, m := range []struct {
		basis          string
		charges, added float64
	}{{"reported", 5, 50 + 50 + 8 + 50 + 12}, {"default", 8, 8 * 4}, {"error", 1, 2}} {
		labels := `{basis="` + m.basis + `",route="api"}`
		if got := metricValue(t, gws[0], "tollgate_gateway_response_charges_total"+labels); got != m.charges {
			t.Errorf("charges %s: %v, want %v", m.basis, got, m.charges)
		}
		if got := metricValue(t, gws[0], "tollgate_gateway_response_cost_tokens_total"+labels); got != m.added {
			t.Errorf("tokens charged %s: %v, want %v", m.basis, got, m.added)
		}
	}

}

// tokens0 is the tokens of tenant's bucket on "api", full (1000) before the
// first request.
func tokens0(t *testing.T, srv *redistest.Server, tenant string) float64 {
	t.Helper()
	n, err := srv.Client(t).Exists(context.Background(), "rl:{"+tenant+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return 1000
	}
	return tokens(t, srv, tenant, "api")
}

// concurrentStreams is the number of streamed requests the debt-bound test
// sends at once (the 1,000).
const concurrentStreams = 1000

// streamBurst sends n streamed requests for tenant at once over gws. With
// hold, the upstream holds every admitted stream after its first event
// until all n have their answer's head, then lets them finish. It returns
// the number admitted; every answer must be 200 or 429.
func streamBurst(t *testing.T, gws []*running, up *usageUpstream, tenant, hold string, n int) int {
	t.Helper()
	var admitted atomic.Int64
	var heads, done sync.WaitGroup
	gate := make(chan struct{})
	q := "sse?u=5"
	if hold != "" {
		q += "&hold=" + hold
	}
	for i := range n {
		heads.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			<-gate
			req, _ := http.NewRequest("GET", gws[i%len(gws)].url+"/api/"+q, nil)
			req.Header.Set("X-Api-Key", tenant)
			res, err := client.Do(req)
			heads.Done()
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			body := readAll(res)
			switch {
			case res.StatusCode == 200 && strings.Contains(body, "[DONE]"):
				admitted.Add(1)
			case res.StatusCode != 429:
				t.Errorf("status %d %q, want a whole stream or 429", res.StatusCode, body)
			}
		}()
	}
	close(gate)
	heads.Wait()
	if hold != "" {
		up.release(hold)
	}
	done.Wait()
	return int(admitted.Load())
}

// TestResponseCostConcurrentStreamsStayWithinDebt: 1,000 concurrent
// streamed requests over three gateways on a bucket of 300 whose responses
// cost 5 each, maxDebt 300 (the default, the capacity).
//
// Held (every admitted stream open until all requests were decided): each
// takes its one token up front, so exactly 300 are admitted, and their
// 1,500 tokens of usage drive the bucket to the debt floor, -300, and no
// further. Not held (charges interleave with admissions): the bucket never
// goes below the floor, and either stopped at it or holds exactly 300 -
// 6 x admitted (every charge whole).
func TestResponseCostConcurrentStreamsStayWithinDebt(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 streams")
	}
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	rules := rule("held", "held", "api", 300, slow, "cost: {response: {jsonField: usage.total_tokens}}") +
		rule("free", "free", "api", 300, slow, "cost: {response: {jsonField: usage.total_tokens}}")
	gws := costCluster(t, srv, up.URL, rules)

	if n := streamBurst(t, gws, up, "held", "all", concurrentStreams); n != 300 {
		t.Errorf("held streams: admitted %d of %d, want exactly 300", n, concurrentStreams)
	}
	wantTokens(t, srv, "held", "api", -300)

	n := streamBurst(t, gws, up, "free", "", concurrentStreams)
	got := tokens(t, srv, "free", "api")
	exact := 300 - 6*float64(n)
	if n < 50 || n > 300 || got < -300 || got > -300+0.01 && (got < exact || got > exact+0.01) {
		t.Fatalf("free streams: admitted %d, bucket at %v; want 50 to 300 admitted and -300 (the floor) or exactly %v", n, got, exact)
	}
	t.Logf("free streams: admitted %d, bucket at %.2f", n, got)
	if res, _ := get(t, gws[0], "free", "sse?u=5"); res.StatusCode != 429 {
		t.Fatalf("after the burst the bucket is in debt: %d, want 429", res.StatusCode)
	}
}

// TestRLSChargeAfterStream: Envoy's rate limit sent when a stream is done
// (apply_on_stream_done) with the response's cost as hits_addend and the
// entry tollgate.dev/charge: the cost is charged into debt, cut at
// maxDebt, and answered OK; the next ordinary call is over the limit. The
// proxy and the rate limit service share the bucket.
func TestRLSChargeAfterStream(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "http://127.0.0.1:1", rule("llm", "*", "chat", 100, slow, "cost: {response: {header: X-Usage-Tokens, maxDebt: 50}}")+
		rule("plain", "plain", "chat", 100, slow))
	gw := start(t, e.rlsOptions(srv.Addr()), testLogger(t))
	c := rlsClient(t, gw)
	if res := call(t, c, "envoy", 1, tr("t", "chat")); res.OverallCode != ok {
		t.Fatalf("admission: %v", res.OverallCode)
	}
	charge := hits(entries("tenant", "t", "route", "chat", "tollgate.dev/charge", "response"), 120)
	if res := call(t, c, "envoy", 0, charge); res.OverallCode != ok {
		t.Fatalf("charge: %v", res.OverallCode)
	}
	wantTokens(t, srv, "t", "chat", -21) // 99 - 120
	if res := call(t, c, "envoy", 0, charge); res.OverallCode != ok {
		t.Fatalf("charge at the floor: %v", res.OverallCode)
	}
	wantTokens(t, srv, "t", "chat", -50) // cut at maxDebt
	if res := call(t, c, "envoy", 1, tr("t", "chat")); res.OverallCode != over {
		t.Fatalf("admission in debt: %v, want OVER_LIMIT", res.OverallCode)
	}
	// Without a response cost the charge takes what the bucket holds, no
	// more (maxDebt 0).
	if res := call(t, c, "envoy", 0, hits(entries("tenant", "plain", "route", "chat", "tollgate.dev/charge", "x"), 150)); res.OverallCode != ok {
		t.Fatalf("charge on a plain rule: %v", res.OverallCode)
	}
	wantTokens(t, srv, "plain", "chat", 0)
}

// TestResponseCostLocalDebt: with Redis down, a response's cost is charged
// to the gateway's local bucket, which goes into debt (down to maxDebt/N)
// and rejects the next request with a Retry-After that counts the debt.
func TestResponseCostLocalDebt(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	e := newEnv(t, up.URL, rule("debtor", "debtor", "api", 10, "refillPerSecond: 1", "cost: {response: {header: X-Usage-Tokens}}")+
		rule("trip", "trip", "create-order", 1000, "refillPerSecond: 1000"))
	o := e.options(srv.Addr())
	o.Replicas = 1
	o.RedisTimeout = 50 * time.Millisecond
	o.BreakerOpenFor = time.Hour // no probe closes it during the test
	gw := start(t, o, testLogger(t))
	if res, _ := get(t, gw, "debtor", "header?u=3"); res.StatusCode != 200 {
		t.Fatalf("with Redis: %d", res.StatusCode)
	}
	wantTokensNear(t, srv, "debtor", 6) // 10 - 1 - 3, mirrored locally
	srv.Kill()
	waitFor(t, 20*time.Second, "breaker open", func() bool {
		send(t, "POST", gw.url+"/orders", "trip")
		return gw.BreakerState() == "open"
	})
	// Locally: 6 and some refill held, 1 taken, 20 charged: cut at -10.
	if res, _ := get(t, gw, "debtor", "header?u=20"); res.StatusCode != 200 {
		t.Fatalf("Redis down, the local bucket holding about 6: %d", res.StatusCode)
	}
	res, _ := get(t, gw, "debtor", "header?u=1")
	retry, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != 429 || retry < 5 || retry > 11 {
		t.Fatalf("local bucket 10 in debt: %d Retry-After %q, want 429 and up to 11 s (11 tokens at 1/s; at least 5: the debt counts, whatever the machine's delays)", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// wantTokensNear fails the test unless tenant's bucket on "api" holds want
// tokens, give or take a second of a 1/s refill.
func wantTokensNear(t *testing.T, srv *redistest.Server, tenant string, want float64) {
	t.Helper()
	if got := tokens(t, srv, tenant, "api"); got < want || got > want+1 {
		t.Fatalf("%s holds %v tokens, want %v", tenant, got, want)
	}
}
