package redisconf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want string // substring of the error; "" for valid
	}{
		{"standalone", Options{Addrs: []string{"a:1"}, Mode: ModeStandalone, PoolSize: 1}, ""},
		{"two addresses standalone", Options{Addrs: []string{"a:1", "b:1"}, Mode: ModeStandalone, PoolSize: 1}, "one address"},
		{"sentinel without master", Options{Addrs: []string{"a:1"}, Mode: ModeSentinel, PoolSize: 1}, "master-name"},
		{"cluster with a db", Options{Addrs: []string{"a:1"}, Mode: ModeCluster, DB: 2, PoolSize: 1}, "redis-db"},
		{"unknown mode", Options{Addrs: []string{"a:1"}, Mode: "ring", PoolSize: 1}, "redis-mode"},
		{"no address", Options{Mode: ModeStandalone, PoolSize: 1}, "at least one"},
	}
	for _, c := range cases {
		err := c.o.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Addrs: []string{"a:1"}, Mode: ModeStandalone, PasswordFile: pw, PoolSize: 1}
	if strings.Contains(o.String(), "hunter2") || strings.Contains(fmt.Sprintf("%+v", o), "hunter2") {
		t.Fatal("the password appears in the options' text")
	}
}

func TestPasswordAndACLUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// A user that may only touch the limiter's keys; then lock the default
	// user out.
	if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "on", ">gwpass", "~rl:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("gwpass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Addrs: []string{srv.Addr()}, Mode: ModeStandalone, Username: "gw", PasswordFile: pw, PoolSize: 2, DialTimeout: time.Second}
	c, err := o.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := limiter.NewRedis(c).Take(context.Background(), limiter.Bucket{Key: limiter.Key("t", "r"), Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000}, 1, 1)
	if err != nil || d.Granted != 1 {
		t.Fatalf("decision with ACL user: %+v %v", d, err)
	}
}

// TestSentinelFailover runs a primary, a replica and a Sentinel, kills the
// primary and checks that decisions continue on the promoted replica.
func TestSentinelFailover(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", fmt.Sprint(primary.Port())))
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"sentinel monitor main 127.0.0.1 %d 1\nsentinel down-after-milliseconds main 500\nsentinel failover-timeout main 2000\n",
		primary.Port())), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.Start(t, redistest.WithArgs("--sentinel"), redistest.WithConfig(conf))

	o := Options{Addrs: []string{sentinel.Addr()}, Mode: ModeSentinel, MasterName: "main", PoolSize: 4, DialTimeout: time.Second}
	c, err := o.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := limiter.NewRedis(c)
	b := limiter.Bucket{Key: limiter.Key("t", "r"), Capacity: 100, RefillTokens: 1, RefillPeriodMs: 3600_000}
	decide := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := l.Take(ctx, b, 1, 1)
		return err
	}
	if err := decide(); err != nil {
		t.Fatalf("through Sentinel: %v", err)
	}
	waitReplicated(t, replica)

	primary.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for decide() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no decision 30s after the primary died: Sentinel failover was not followed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if role := replica.Client(t).Do(context.Background(), "ROLE").Val(); fmt.Sprint(role) == "" || !strings.HasPrefix(fmt.Sprint(role), "[master") {
		t.Fatalf("the replica's role is %v, want master after the failover", role)
	}
}

// waitReplicated waits until the replica has the bucket.
func waitReplicated(t *testing.T, replica *redistest.Server) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := limiter.Peek(context.Background(), replica.Client(t), limiter.Key("t", "r")); st.Found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica never caught up")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelWithPassword: Sentinels that require a password of their own
// (requirepass, here set through ACL on the running Sentinel) are reached
// with --redis-sentinel-password-file; without it the client cannot find the
// primary.
func TestSentinelWithPassword(t *testing.T) {
	primary := redistest.Start(t)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor main 127.0.0.1 %d 1\n", primary.Port())), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := redistest.Start(t, redistest.WithArgs("--sentinel"), redistest.WithConfig(conf))
	admin := sentinel.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "default", "resetpass", ">sentinel-secret").Err(); err != nil {
		t.Fatal(err)
	}
	decide := func(o Options) error {
		c, err := o.NewClient()
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = limiter.NewRedis(c).Take(ctx, limiter.Bucket{Key: limiter.Key("t", "r"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 1000}, 1, 1)
		return err
	}
	o := Options{Addrs: []string{sentinel.Addr()}, Mode: ModeSentinel, MasterName: "main", PoolSize: 2, DialTimeout: time.Second}
	if err := decide(o); err == nil {
		t.Fatal("a decision through a password-protected Sentinel succeeded without the password")
	}
	pw := filepath.Join(t.TempDir(), "sentinel-pw")
	if err := os.WriteFile(pw, []byte("sentinel-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.SentinelPasswordFile = pw
	if err := decide(o); err != nil {
		t.Fatalf("with --redis-sentinel-password-file: %v", err)
	}
	if strings.Contains(o.String(), "sentinel-secret") {
		t.Error("the Sentinel password appears in the options' text")
	}
	// The environment variable works too.
	o.SentinelPasswordFile = ""
	t.Setenv(SentinelPasswordEnv, "sentinel-secret")
	if err := decide(o); err != nil {
		t.Fatalf("with %s: %v", SentinelPasswordEnv, err)
	}
}

// TestSpeaksRESP2: the client's connections use RESP2 (see NewClient), as
// Redis itself reports them.
func TestSpeaksRESP2(t *testing.T) {
	srv := redistest.Start(t)
	o := Options{Addrs: []string{srv.Addr()}, Mode: ModeStandalone, PoolSize: 1, DialTimeout: time.Second}
	c, err := o.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Do(context.Background(), "CLIENT", "INFO").Text()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(info), "resp=2") {
		t.Fatalf("CLIENT INFO: %q, want resp=2", info)
	}
}
