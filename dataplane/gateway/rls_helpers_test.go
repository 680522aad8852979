package gateway_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate-dev/tollgate/dataplane/gateway"
)

// rlsOptions are options for a gateway serving only the rate limit service
// (no --routes) on a loopback port.
func (e *env) rlsOptions(redisAddr string) gateway.Options {
	o := e.options(redisAddr)
	o.RoutesFile = ""
	o.RLSListen = "127.0.0.1:0"
	return o
}

// writeDomains writes a --rls-domains file into e's directory.
func (e *env) writeDomains(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, "domains.yaml")
	writeAtomic(t, p, content)
	return p
}

// rlsConn dials the gateway's rate limit service, as Envoy does: one HTTP/2
// connection shared by every call.
func rlsConn(t *testing.T, gw *running) *grpc.ClientConn {
	t.Helper()
	if gw.RLSAddr() == "" {
		t.Fatal("the gateway serves no rate limit service")
	}
	cc, err := grpc.NewClient("passthrough:///"+gw.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func rlsClient(t *testing.T, gw *running) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(rlsConn(t, gw))
}

// entries builds a descriptor from key, value pairs.
func entries(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// tr is the descriptor {tenant, route}.
func tr(tenant, route string) *ratelimitv3.RateLimitDescriptor {
	return entries("tenant", tenant, "route", route)
}

// hits sets a descriptor's own hits_addend.
func hits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// call sends one ShouldRateLimit and fails the test on an error.
func call(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, addend uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	res, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: addend, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(res.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(res.Statuses), len(ds))
	}
	return res
}

// refused sends a request that must fail with InvalidArgument and a message
// containing want.
func refused(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, want string) {
	t.Helper()
	_, err := c.ShouldRateLimit(t.Context(), req)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("got %v, want InvalidArgument containing %q", err, want)
	}
}

// headers returns the response headers to add as a map; a name twice fails.
func headers(t *testing.T, res *rlsv3.RateLimitResponse) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range res.ResponseHeadersToAdd {
		if _, dup := m[h.Key]; dup {
			t.Fatalf("header %s twice", h.Key)
		}
		m[h.Key] = h.Value
	}
	return m
}

// expectHeaders checks the response headers exactly: want lists every
// header; "" values must be absent.
func expectHeaders(t *testing.T, res *rlsv3.RateLimitResponse, want map[string]string) {
	t.Helper()
	got := headers(t, res)
	for k, v := range want {
		if g, ok := got[k]; v == "" && ok {
			t.Errorf("header %s: %q, want none", k, g)
		} else if v != "" && g != v {
			t.Errorf("header %s: %q, want %q", k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected header %s: %q", k, v)
		}
	}
}

// codes of the statuses, as a string like "OK OVER_LIMIT".
func statusCodes(res *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range res.Statuses {
		s = append(s, st.Code.String())
	}
	return strings.Join(s, " ")
}

func remainings(res *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range res.Statuses {
		s = append(s, fmt.Sprint(st.LimitRemaining))
	}
	return strings.Join(s, " ")
}

// week is the Retry-After of an empty bucket under the slow refill (1 token
// per 168h), in seconds.
const week = "604800"

func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }
