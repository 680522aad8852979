package gateway_test

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestFailedIdentificationsLimitedByDefault: with the default flags, an
// address that keeps sending unknown API keys gets 429 after the burst of
// failures (20), whatever X-Forwarded-For it claims.
func TestFailedIdentificationsLimitedByDefault(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	keys := e.dir + "/keys.yaml"
	writeAtomic(t, keys, "keys:\n  - tenant: shop-a\n    key: sk-shop-a-0123456789\n")
	o := e.defaultIdentity(srv.Addr())
	o.APIKeysFile = keys
	gw := start(t, o, testLogger(t))

	begin := time.Now()
	unauthorized := 0
	for i := range 60 {
		req, _ := http.NewRequest("POST", gw.url+"/orders", nil)
		req.Header.Set("X-Api-Key", "guess-"+strings.Repeat("x", i%7)+string(rune('a'+i%26)))
		req.Header.Set("X-Forwarded-For", "10.0.0."+string(rune('0'+i%10)))
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusTooManyRequests {
			break
		}
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401 or 429", i+1, res.StatusCode)
		}
		unauthorized++
	}
	// 20 failures, plus one per second of refill at most.
	if most := 20 + int(time.Since(begin).Seconds()) + 1; unauthorized < 20 || unauthorized > most {
		t.Fatalf("%d guesses answered 401 before a 429, want 20 (at most %d with refill)", unauthorized, most)
	}
}

// TestFailedIdentificationsBlockAddress: once an address has spent its
// failures, even a right key gets 429 (no oracle for guessing), other
// addresses are unaffected, and the metric counts reasons without keys.
func TestFailedIdentificationsBlockAddress(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	const good = "sk-shop-a-0123456789"
	keys := e.dir + "/keys.yaml"
	writeAtomic(t, keys, "keys:\n  - tenant: shop-a\n    key: "+good+"\n")
	o := e.defaultIdentity(srv.Addr())
	o.APIKeysFile = keys
	o.FailureBurst, o.FailurePerSecond = 2, 0.001 // one failure back per 1000s
	gw := start(t, o, testLogger(t))

	if res, _ := send(t, "POST", gw.url+"/orders", "wrong-guess-1"); res.StatusCode != 401 {
		t.Fatalf("first failure: %d, want 401", res.StatusCode)
	}
	if res, _ := send(t, "POST", gw.url+"/orders", strings.Repeat("k", 600)); res.StatusCode != 400 {
		t.Fatalf("second failure: %d, want 400", res.StatusCode)
	}
	for _, key := range []string{"wrong-guess-2", good} {
		res, body := send(t, "POST", gw.url+"/orders", key)
		if res.StatusCode != 429 || !strings.Contains(body, "too many failed identifications") {
			t.Fatalf("after the failures: %d %s, want 429", res.StatusCode, body)
		}
		if ra := res.Header.Get("Retry-After"); ra != "1000" {
			t.Fatalf("Retry-After %q, want 1000", ra)
		}
	}
	// Another client address (127.0.0.2, also loopback) is not affected.
	other := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
	}}
	req, _ := http.NewRequest("POST", gw.url+"/orders", nil)
	req.Header.Set("X-Api-Key", good)
	res, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("the right key from another address: %d, want 200", res.StatusCode)
	}
	for series, want := range map[string]float64{
		`tollgate_gateway_identity_failures_total{reason="unknown"}`: 1,
		`tollgate_gateway_identity_failures_total{reason="invalid"}`: 1,
		`tollgate_gateway_identity_failures_total{reason="limited"}`: 2,
	} {
		if got := metricValue(t, gw, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if m := scrape(t, gw); strings.Contains(m, "wrong-guess") || strings.Contains(m, good) {
		t.Error("a key appears in the metrics")
	}
	if got := srv.Client(t).Keys(t.Context(), "*").Val(); len(got) != 1 {
		t.Errorf("Redis keys %v, want only the one of the admitted request", got)
	}
}
