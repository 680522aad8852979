package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestFailedIdentificationsLimitedByDefault: with the default flags, an
// address that keeps sending unknown API keys gets 429 after the burst of
// failures (20), whatever X-Forwarded-For it claims.
func TestFailedIdentificationsLimitedByDefault(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	o := keyedOptions(t, e, srv.Addr(), "sk-shop-a-0123456789")
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
	o := keyedOptions(t, e, srv.Addr(), good)
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
	if code := sendFrom(t, "127.0.0.2", gw.url+"/orders", good); code != 200 {
		t.Fatalf("the right key from another address: %d, want 200", code)
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

// TestFailedIdentificationsFullTable: clients of one /24 (127.1.0.0/24, on
// loopback) fill the table of --identity-failure-max-addresses with
// failures; a client of another prefix that never failed still gets 200
// with its key, and 401 (not 429) with a wrong one. Addresses of the
// flooding /24 get 429 with a right key, also one that never failed: it is
// judged by its /24, whose failures are over the burst.
func TestFailedIdentificationsFullTable(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	const good = "sk-shop-a-0123456789"
	o := keyedOptions(t, e, srv.Addr(), good)
	o.FailureBurst, o.FailurePerSecond, o.FailureMaxAddresses = 2, 0.001, 4
	gw := start(t, o, testLogger(t))
	url := gw.url + "/orders"

	for i := 1; i <= 12; i++ {
		for range 3 {
			if code := sendFrom(t, fmt.Sprintf("127.1.0.%d", i), url, "wrong-guess"); code != 401 && code != 429 {
				t.Fatalf("a wrong key from 127.1.0.%d: %d, want 401 or 429", i, code)
			}
		}
	}
	for _, c := range []struct {
		from, key string
		want      int
	}{
		{"127.2.0.1", good, 200},          // another prefix, never failed
		{"127.3.0.1", "wrong-guess", 401}, // its own failures are not spent
		{"127.3.0.1", good, 200},
		{"127.1.0.12", good, 429},  // a flooding address: no oracle
		{"127.1.0.200", good, 429}, // never failed, but its /24 did
	} {
		if code := sendFrom(t, c.from, url, c.key); code != c.want {
			t.Errorf("key %q from %s: %d, want %d", c.key, c.from, code, c.want)
		}
	}
}

// keyedOptions are e's options with the identity flags at their defaults
// and a key file that maps key to the tenant shop-a.
func keyedOptions(t *testing.T, e *env, redisAddr, key string) gateway.Options {
	t.Helper()
	keys := e.dir + "/keys.yaml"
	writeAtomic(t, keys, "keys:\n  - tenant: shop-a\n    key: "+key+"\n")
	o := e.defaultIdentity(redisAddr)
	o.APIKeysFile = keys
	return o
}

// sendFrom sends POST url with key from the local address ip (any address
// of 127.0.0.0/8 is loopback on Linux) and returns the status.
func sendFrom(t *testing.T, ip, url, key string) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext,
	}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest("POST", url, nil)
	req.Header.Set("X-Api-Key", key)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}
