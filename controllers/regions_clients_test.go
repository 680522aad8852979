package controllers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/certtest"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestRegionClients: the rebalancer reaches each region's Redis as the
// flags say: eu a redis-server reached on its TLS port, as an ACL user
// (--region-redis-tls, --region-redis-tls-ca-file, the user and password),
// us a 3-master Redis Cluster given by one node (--region-redis-mode
// cluster: the pass reads every master). Each region's rings, written by
// the token bucket script, are read through the clients the options build;
// a wrong CA fails the read.
func TestRegionClients(t *testing.T) {
	dir := t.TempDir()
	tlsSrv := redistest.StartTLS(t, "--user", "rebalancer", "on", ">s3cret", "~*", "+@all")
	crt := tlsSrv.CertFile
	// The certificate names localhost.
	_, port, _ := net.SplitHostPort(tlsSrv.Addr)
	euAddr := net.JoinHostPort("localhost", port)
	us := redistest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	euOpts := RegionOptions{Enabled: true, Redis: map[string]string{"eu": euAddr}, Username: "rebalancer", PasswordFile: pw,
		TLS: true, TLSCAFile: crt, ReadTimeout: 5 * time.Second}
	usOpts := RegionOptions{Enabled: true, Redis: map[string]string{"us": us.Nodes()[0].Addr()}, Mode: regionCluster, ReadTimeout: 5 * time.Second}
	euClients, err := euOpts.clients()
	if err != nil {
		t.Fatal(err)
	}
	usClients, err := usOpts.clients()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = euClients["eu"].Close()
		_ = usClients["us"].Close()
	})
	if _, ok := usClients["us"].(*redis.ClusterClient); !ok {
		t.Fatalf("--region-redis-mode cluster built a %T", usClients["us"])
	}

	// The gateways' side: each region's script calls record its demand.
	record := func(c redis.UniversalClient, region string, tenants int) {
		t.Helper()
		r := limiter.NewRedis(c)
		for i := range tenants {
			k := limiter.RegionKey(fmt.Sprintf("t%d", i), "orders", region)
			b := limiter.Bucket{Key: k, Capacity: 1000, RefillTokens: 1000, RefillPeriodMs: 1000,
				Demand: limiter.Demand{Key: limiter.DemandKey(k, "ns/r", region), WindowMs: 3_600_000, Slots: 4, Percent: 50}}
			if _, err := r.Take(ctx, b, 1, 1); err != nil {
				t.Fatalf("%s: %v", region, err)
			}
		}
	}
	record(euClients["eu"], "eu", 1)
	record(usClients["us"], "us", 6)

	for region, c := range map[string]redis.UniversalClient{"eu": euClients["eu"], "us": usClients["us"]} {
		readings, err := readRegion(ctx, c, region, time.Minute, nil)
		if err != nil || readings["ns/r"] == nil {
			t.Fatalf("%s: readRegion %+v %v, want the rule's rings", region, readings, err)
		}
	}

	// A CA that did not sign the server's certificate: no reading.
	otherCA, _ := certtest.New("other", "localhost")
	bad := filepath.Join(dir, "other.crt")
	if err := os.WriteFile(bad, otherCA, 0o600); err != nil {
		t.Fatal(err)
	}
	euOpts.TLSCAFile = bad
	badClients, err := euOpts.clients()
	if err != nil {
		t.Fatal(err)
	}
	defer badClients["eu"].Close()
	if _, err := readRegion(ctx, badClients["eu"], "eu", time.Minute, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a region's Redis whose certificate the CA did not sign: %v, want a certificate error", err)
	}
	euOpts.TLSCAFile = filepath.Join(dir, "missing.crt")
	if _, err := euOpts.clients(); err == nil || !strings.Contains(err.Error(), "--region-redis-tls-ca-file") {
		t.Fatalf("a missing CA file: %v, want an error naming --region-redis-tls-ca-file", err)
	}
}
