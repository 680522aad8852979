package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// defaultIdentity returns e's options with the identity flags at their
// defaults, as `tollgate gateway` gets them when none is given.
func (e *env) defaultIdentity(redisAddr string) gateway.Options {
	o := e.options(redisAddr)
	var d gateway.Options
	d.AddFlags(newFlagSet())
	o.Identity, o.APIKeysFile = d.Identity, d.APIKeysFile
	return o
}

// TestDefaultsRefuseUnmappedKeys: with the default flags a client cannot pick
// its own tenant. Without an API key file the gateway refuses to start;
// with one, a key that is not in it (such as a tenant's name) gets 401 and
// touches no bucket.
func TestDefaultsRefuseUnmappedKeys(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))

	gw, err := gateway.New(e.defaultIdentity(srv.Addr()), testLogger(t))
	if err == nil {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_ = gw.Run(ctx) // releases the listeners
		t.Fatal("a gateway with default flags and no --api-keys-file started: every X-Api-Key value would be a tenant")
	}
	for _, want := range []string{"--api-keys-file is required", "--identity=header-is-tenant"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	running := start(t, keyedOptions(t, e, srv.Addr(), "sk-shop-a-0123456789"), testLogger(t))
	for _, key := range []string{"shop-a", "anything-new"} {
		if res, body := send(t, "POST", running.url+"/orders", key); res.StatusCode != 401 {
			t.Fatalf("X-Api-Key %s: %d %s, want 401", key, res.StatusCode, body)
		}
	}
	if res, body := send(t, "POST", running.url+"/orders", "sk-shop-a-0123456789"); res.StatusCode != 200 {
		t.Fatalf("mapped key: %d %s, want 200", res.StatusCode, body)
	}
	if got := srv.Client(t).Keys(t.Context(), "*").Val(); len(got) != 1 || got[0] != "rl:{shop-a}" {
		t.Fatalf("Redis keys %v, want only shop-a's bucket", got)
	}
}

// TestHeaderIsTenantOptIn: the explicit opt-in takes the header as the tenant
// and says so in the log; it cannot be combined with a key file.
func TestHeaderIsTenantOptIn(t *testing.T) {
	srv := redistest.Start(t)
	up := echoUpstream(t)
	e := newEnv(t, up.URL, rule("r", "*", "*", 100, slow))
	o := e.defaultIdentity(srv.Addr())
	o.Identity = gateway.IdentityHeaderIsTenant
	var logs strings.Builder
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) { mu.Lock(); logs.WriteString(prefix + args + "\n"); mu.Unlock() }, funcr.Options{})
	gw := start(t, o, log)
	if res, body := send(t, "POST", gw.url+"/orders", "shop-a"); res.StatusCode != 200 {
		t.Fatalf("X-Api-Key shop-a: %d %s, want 200", res.StatusCode, body)
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "INSECURE: --identity=header-is-tenant") {
		t.Errorf("no warning logged at start:\n%s", logs.String())
	}
	mu.Unlock()

	for _, tc := range []struct {
		name     string
		identity string // --identity
		keys     string // --api-keys-file
		want     string // substring of the error
	}{
		{"both", gateway.IdentityHeaderIsTenant, e.dir + "/keys.yaml", "--api-keys-file needs mapped in --identity"},
		{"unknown mode", "trust-me", "", `--identity "trust-me": want mapped, header-is-tenant or jwt`},
	} {
		o := e.defaultIdentity(srv.Addr())
		o.Identity, o.APIKeysFile = tc.identity, tc.keys
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// The rate limit service alone takes tenants from Envoy's descriptors and
	// needs no key file.
	rlsOnly := e.rlsOptions(srv.Addr())
	rlsOnly.Identity, rlsOnly.APIKeysFile = gateway.IdentityMapped, ""
	if err := rlsOnly.Validate(); err != nil {
		t.Errorf("rate limit service only, default identity: %v", err)
	}
}
