package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// The tests in this file cover a client that hangs up before its response's
// cost arrived (issue 27, item 7): the gateway reads the rest of the
// upstream's answer without it, within bounds, and charges what the answer
// reports, or onClientGone when the bounds end the read first.

// goneRules are response-cost rules on "api" (bucket 1000, default 4,
// onError 2): tenant "sse" without onClientGone (its default applies),
// tenant "gone" with onClientGone 7.
func goneRules() string {
	return rule("sse", "sse", "api", 1000, slow, "cost: {response: {jsonField: usage.total_tokens, default: 4, onError: 2}}") +
		rule("gone", "gone", "api", 1000, slow, "cost: {response: {jsonField: usage.total_tokens, default: 4, onError: 2, onClientGone: 7}}")
}

// hangUp sends GET /api/<path> for tenant; with firstEvent it reads the
// answer's first line before it hangs up, else it hangs up once the
// upstream holds the request (held).
func hangUp(t *testing.T, gw *running, tenant, path string, firstEvent bool, held func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", gw.url+"/api/"+path, nil)
	req.Header.Set("X-Api-Key", tenant)
	if !firstEvent {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		waitFor(t, 10*time.Second, "the request held at the upstream", held)
		cancel()
		<-done
		return
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || !strings.Contains(line, "Hel") {
		t.Fatalf("first event: %q %v", line, err)
	}
	cancel()
	res.Body.Close()
}

// charges is the number of responses the gateway charged on "api", by any
// basis.
func charges(t *testing.T, gw *running) float64 {
	t.Helper()
	text := scrape(t, gw)
	var n float64
	for _, b := range []string{"reported", "default", "error", "client_gone"} {
		v, _ := findMetric(text, `tollgate_gateway_response_charges_total{basis="`+b+`",route="api"}`)
		n += v
	}
	return n
}

// waitCharged waits until gw has charged n responses on "api".
func waitCharged(t *testing.T, gw *running, n float64) {
	t.Helper()
	waitFor(t, 30*time.Second, "the charge", func() bool { return charges(t, gw) >= n })
}

// waitLeft waits until the gateway saw the client of the stream held at
// name leave: it reads on without it (a drain in flight), or (before the
// fix) it canceled the upstream request.
func waitLeft(t *testing.T, gw *running, up *usageUpstream, name string, drains float64) {
	t.Helper()
	waitFor(t, 10*time.Second, "the gateway to see the client leave", func() bool {
		return up.wasCanceled(name) || metricValue(t, gw, "tollgate_gateway_response_drains_in_flight") >= drains
	})
}

// TestResponseCostClientHangsUp: a client reads the first event of a
// stream and hangs up; the upstream sends the usage (300) after that. The
// gateway reads the answer to its end without the client and charges 300,
// as for a client that read it all; the upstream's request was not
// canceled.
func TestResponseCostClientHangsUp(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	gw := costCluster(t, srv, up.URL, responseRules(1000, ""))[0]
	hangUp(t, gw, "sse", "sse?u=300&hold=h", true, nil)
	waitLeft(t, gw, up, "h", 1)
	up.release("h")
	waitCharged(t, gw, 1)
	wantTokens(t, srv, "sse", "api", 1000-1-300)
	if up.wasCanceled("h") {
		t.Error("the upstream's request was canceled when the client left")
	}
	if v := metricValue(t, gw, `tollgate_gateway_response_charges_total{basis="reported",route="api"}`); v != 1 {
		t.Errorf("reported charges %v, want 1", v)
	}
	waitFor(t, 10*time.Second, "no drain in flight", func() bool {
		return metricValue(t, gw, "tollgate_gateway_response_drains_in_flight") == 0
	})
}

// TestResponseCostClientGoneBeforeHeaders: a client that hangs up before
// the response headers came cancels the upstream's request (as on every
// route), and is charged onClientGone: the upstream may have done the
// work. Unset, onClientGone is the rule's default (4), not onError (2).
func TestResponseCostClientGoneBeforeHeaders(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	gw := costCluster(t, srv, up.URL, goneRules())[0]
	for i, c := range []struct {
		tenant string
		want   float64
	}{{"sse", 4}, {"gone", 7}} {
		name := "pre-" + c.tenant
		hangUp(t, gw, c.tenant, "slow?u=300&hold="+name, false, func() bool { return up.streams.Load() > 0 })
		receive(t, up.cancellation(name), 1, "upstream request canceled")
		waitCharged(t, gw, float64(i+1))
		wantTokens(t, srv, c.tenant, "api", 1000-1-c.want)
		waitFor(t, 10*time.Second, "the upstream request ended", func() bool { return up.streams.Load() == 0 })
		if cost := explainOf(t, gw, c.tenant, "api").Rule.Cost; !strings.Contains(cost, "client gone: "+strconv.Itoa(int(c.want))) {
			t.Errorf("explained cost of %s: %q", c.tenant, cost)
		}
	}
	if v := metricValue(t, gw, `tollgate_gateway_response_charges_total{basis="client_gone",route="api"}`); v != 2 {
		t.Errorf("client_gone charges %v, want 2", v)
	}
}

// goneStep is one stream whose client hangs up after the first event: the
// path's query (the hold is added), whether the test releases the
// upstream after the client left, and the charge the response must cost
// with its basis.
type goneStep struct {
	tenant, query string
	release       bool
	want          float64
	basis         string
}

// run sends the stream on gw, hangs up, releases the upstream if the step
// says so, and checks the charge and its basis.
func (s goneStep) run(t *testing.T, srv *redistest.Server, gw *running, up *usageUpstream, name string) {
	t.Helper()
	before := tokens0(t, srv, s.tenant)
	basis := `tollgate_gateway_response_charges_total{basis="` + s.basis + `",route="api"}`
	n, nb := charges(t, gw), metricValue(t, gw, basis)
	hangUp(t, gw, s.tenant, s.query+"&hold="+name, true, nil)
	waitLeft(t, gw, up, name, 1)
	if s.release {
		up.release(name)
	}
	waitCharged(t, gw, n+1)
	if got := tokens(t, srv, s.tenant, "api"); got < before-1-s.want || got > before-1-s.want+0.01 {
		t.Fatalf("%s %s: charged %v, want %v", s.tenant, s.query, before-1-got, s.want)
	}
	if v := metricValue(t, gw, basis); v != nb+1 {
		t.Fatalf("%s %s: %s went from %v to %v, want one more", s.tenant, s.query, basis, nb, v)
	}
}

// TestResponseCostClientGoneBounds: what the gateway reads after the
// client left is bounded by --response-cost-drain-bytes (64 KiB here) and
// the route's timeout. Within them the usage is charged; cut off by them,
// onClientGone (7 for tenant gone; the default 4 for tenant sse, which
// does not set it). An upstream that breaks off its answer meanwhile is
// charged onError (2), as for a client that stayed.
func TestResponseCostClientGoneBounds(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	e := newEnv(t, up.URL, goneRules())
	o := e.options(srv.Addr())
	o.ResponseCostDrainBytes = 64 << 10
	gw := start(t, o, testLogger(t))
	for i, s := range []goneStep{
		{"gone", "sse?u=300&pad=30000", true, 300, "reported"}, // within the cap
		{"gone", "sse?u=300&pad=200000", true, 7, "client_gone"},
		{"sse", "sse?u=300&pad=200000", true, 4, "client_gone"},
		{"gone", "sse?u=300&brk=1", true, 2, "error"},
	} {
		s.run(t, srv, gw, up, "cap-"+strconv.Itoa(i))
	}

	// The route's timeout (--upstream-timeout here) ends the wait for an
	// upstream that sends nothing more: its request is canceled.
	o = e.options(srv.Addr())
	o.UpstreamTimeout = time.Second
	gw = start(t, o, testLogger(t))
	goneStep{"gone", "sse?u=300", false, 7, "client_gone"}.run(t, srv, gw, up, "time")
	receive(t, up.cancellation("time"), 1, "upstream request canceled at the route's timeout")
	waitFor(t, 10*time.Second, "no drain in flight", func() bool {
		return metricValue(t, gw, "tollgate_gateway_response_drains_in_flight") == 0
	})
}

// TestResponseCostDrainsBounded: with --response-cost-max-drains 1, a
// second client that hangs up while one answer is read without its client
// gets no drain: its upstream request is canceled at once, it is charged
// onClientGone, and the refusal is counted. The first is still charged its
// usage.
func TestResponseCostDrainsBounded(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	e := newEnv(t, up.URL, goneRules())
	o := e.options(srv.Addr())
	o.ResponseCostMaxDrains = 1
	gw := start(t, o, testLogger(t))
	hangUp(t, gw, "gone", "sse?u=300&hold=first", true, nil)
	waitLeft(t, gw, up, "first", 1)
	goneStep{"gone", "sse?u=300", false, 7, "client_gone"}.run(t, srv, gw, up, "second")
	if !up.wasCanceled("second") {
		t.Error("the second upstream request was not canceled")
	}
	if v := metricValue(t, gw, "tollgate_gateway_response_drains_refused_total"); v != 1 {
		t.Errorf("refused drains %v, want 1", v)
	}
	before := tokens(t, srv, "gone", "api")
	up.release("first")
	waitCharged(t, gw, 2)
	wantTokens(t, srv, "gone", "api", before-300)
}

// TestResponseCostDrainCutAtShutdown: an answer read without its client
// when the gateway stops is cut then (after --shutdown-grace), not at the
// route's timeout (10 minutes here): no upstream request outlives the
// gateway.
func TestResponseCostDrainCutAtShutdown(t *testing.T) {
	srv := redistest.Start(t)
	up := newUsageUpstream(t)
	e := newEnv(t, up.URL, goneRules())
	o := e.options(srv.Addr())
	o.UpstreamTimeout = 10 * time.Minute
	gw := start(t, o, testLogger(t))
	hangUp(t, gw, "gone", "sse?u=300&hold=shut", true, nil)
	waitLeft(t, gw, up, "shut", 1)
	gw.stop()
	receive(t, up.cancellation("shut"), 1, "upstream request canceled when the gateway stopped")
}

// TestResponseCostDrainFlags: the defaults (1 MiB, 1024 at once), 0 allowed
// (nothing read after a hang-up), negative bounds refused by name.
func TestResponseCostDrainFlags(t *testing.T) {
	o := newEnv(t, "http://127.0.0.1:1", "").options("127.0.0.1:1")
	if o.ResponseCostDrainBytes != 1<<20 || o.ResponseCostMaxDrains != 1024 {
		t.Errorf("defaults %d bytes, %d drains; want 1 MiB, 1024", o.ResponseCostDrainBytes, o.ResponseCostMaxDrains)
	}
	o.ResponseCostDrainBytes, o.ResponseCostMaxDrains = 0, 0
	if err := o.Validate(); err != nil {
		t.Errorf("0 and 0: %v", err)
	}
	for _, bad := range []func(*gateway.Options){
		func(o *gateway.Options) { o.ResponseCostDrainBytes = -1 },
		func(o *gateway.Options) { o.ResponseCostMaxDrains = -1 },
	} {
		b := o
		bad(&b)
		if err := b.Validate(); err == nil || !strings.Contains(err.Error(), "--response-cost-drain-bytes and --response-cost-max-drains must not be negative") {
			t.Errorf("negative bound: %v", err)
		}
	}
}
