package limiter

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// recConn records the last write on a connection.
type recConn struct {
	net.Conn
	mu   sync.Mutex
	last []byte
}

func (c *recConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.last = append(c.last[:0], p...)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestPipeWritesWhatGoRedisWrites: for every shape of call (a plain take, a
// prefetch, a charge with debt, a quota, the 0.1-compatible layout, EVAL
// with the script's text) a worker's own connection sends the same bytes
// as go-redis sends for the same command.
func TestPipeWritesWhatGoRedisWrites(t *testing.T) {
	srv := redistest.Start(t)
	var rc *recConn
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true, PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			rc = &recConn{Conn: nc}
			return rc, nil
		}})
	t.Cleanup(func() { _ = c.Close() })
	plain := Bucket{Key: Key("shop-a", "search"), Capacity: 100, RefillTokens: 50, RefillPeriodMs: 1000}
	fractional := plain
	fractional.Capacity, fractional.Unit = 2.5, 1000
	huge := plain
	huge.Capacity = 1 << 52
	tiny := plain
	tiny.Capacity = 1e-7
	charge := plain
	charge.Charge, charge.MaxDebt = true, 7.25
	quota := plain
	quota.Quota = Quota{Key: "q:{shop-a}:search", Limit: 1e6, Start: 1_700_000_000_000, Switch: 1_700_000_500_000,
		End: 1_700_001_000_000, Owed: 3, OwedStart: 1_699_999_000_000, ShiftMs: 60_000}
	shard := Bucket{Key: "rl:shop-a:search:s3", Capacity: 10, RefillTokens: 1, RefillPeriodMs: 100}
	for _, tc := range []struct {
		name         string
		b            Bucket
		cost, want   int64
		deadlineMs   int64
		layout       Layout
		withText     bool
		skipRedisRun bool
	}{
		{name: "take", b: plain, cost: 1, want: 1, deadlineMs: 1_700_000_000_123},
		{name: "prefetch", b: plain, cost: 1, want: 40},
		{name: "fractional capacity", b: fractional, cost: 250, want: 250},
		{name: "huge capacity", b: huge, cost: 1, want: 1},
		{name: "tiny capacity", b: tiny, cost: 1, want: 1},
		{name: "fractional debt", b: func() Bucket { b := charge; b.MaxDebt = 0.125; return b }(), cost: 1, want: 1},
		{name: "no debt", b: func() Bucket { b := charge; b.MaxDebt = 0; return b }(), cost: 1, want: 1},
		{name: "charge", b: charge, cost: 12, want: 12},
		{name: "quota", b: quota, cost: 1, want: 1, deadlineMs: 99},
		{name: "quota charge", b: func() Bucket { b := quota; b.Charge = true; return b }(), cost: 3, want: 3},
		{name: "shard", b: shard, cost: 1, want: 1},
		{name: "compat layout", b: plain, cost: 1, want: 1, layout: LayoutCompat},
		{name: "eval", b: plain, cost: 1, want: 1, withText: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc scriptCmd
			cmd := sc.command(context.Background(), &tc.b, tc.cost, tc.want, tc.deadlineMs, tc.layout, tc.withText)
			_ = c.Process(context.Background(), cmd) // the reply does not matter here
			rc.mu.Lock()
			goRedis := append([]byte(nil), rc.last...)
			rc.mu.Unlock()
			var a scriptArgs
			keys, args := a.fill(&tc.b, tc.cost, tc.want, tc.deadlineMs, tc.layout)
			ours := appendScript(nil, keys, args, tc.withText)
			if !bytes.Equal(ours, goRedis) {
				t.Fatalf("the worker's connection writes\n%q\ngo-redis writes\n%q", ours, goRedis)
			}
		})
	}
}

// TestReadReply reads RESP2 replies as Redis writes them, and some it
// never should: a reply of an unexpected shape fails its call and leaves
// the connection usable (the next reply is read), bytes that are not RESP
// fail the connection.
func TestReadReply(t *testing.T) {
	long := "ERR " + strings.Repeat("x", 10_000)
	for _, tc := range []struct {
		name, in  string
		want      []int64
		replyErr  string // substring; "" for none
		streamErr bool
	}{
		{name: "five integers", in: "*5\r\n:1\r\n:41\r\n:0\r\n:1200\r\n:1700000000123\r\n", want: []int64{1, 41, 0, 1200, 1700000000123}},
		{name: "negative", in: "*5\r\n:-1\r\n:0\r\n:0\r\n:0\r\n:-9223372036854775808\r\n", want: []int64{-1, 0, 0, 0, -1 << 63}},
		{name: "eight integers", in: "*8\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n", want: []int64{1, 2, 3, 4, 5, 6, 7, 8}},
		{name: "empty array", in: "*0\r\n", want: []int64{}},
		{name: "error", in: "-NOSCRIPT No matching script. Please use EVAL.\r\n", replyErr: "NOSCRIPT No matching script"},
		{name: "long error", in: "-" + long + "\r\n", replyErr: long},
		{name: "eleven integers", in: "*11\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:10\r\n:11\r\n", want: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "twelve integers", in: "*12\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:10\r\n:11\r\n:12\r\n", replyErr: "12 values"},
		{name: "nil array", in: "*-1\r\n", replyErr: "nil"},
		{name: "bulk element", in: "*2\r\n:1\r\n$3\r\nabc\r\n", replyErr: "unexpected element"},
		{name: "nested array", in: "*2\r\n*1\r\n:1\r\n:2\r\n", replyErr: "unexpected element"},
		{name: "status", in: "+OK\r\n", replyErr: "status"},
		{name: "bulk", in: "$5\r\nhello\r\n", replyErr: "unexpected reply"},
		{name: "nil bulk", in: "$-1\r\n", replyErr: "unexpected reply"},
		{name: "integer", in: ":7\r\n", replyErr: "unexpected reply"},
		{name: "no CR", in: "*1\n:1\n", streamErr: true},
		{name: "bad length", in: "*x\r\n", streamErr: true},
		{name: "bad integer", in: "*1\r\n:1a\r\n", streamErr: true},
		{name: "overflow", in: "*1\r\n:9223372036854775808\r\n", streamErr: true},
		{name: "unknown type", in: "?\r\n", streamErr: true},
		{name: "cut short", in: "*5\r\n:1\r\n", streamErr: true},
		{name: "deep", in: strings.Repeat("*1\r\n", 20) + ":1\r\n", streamErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const next = "*5\r\n:9\r\n:9\r\n:9\r\n:9\r\n:9\r\n"
			rd := bufio.NewReaderSize(strings.NewReader(tc.in+next), 4096)
			var dst replyInts
			n, replyErr, err := readReply(rd, &dst, true)
			if tc.streamErr {
				if err == nil {
					t.Fatalf("read %v (reply error %v), want the connection failed", dst[:n], replyErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("connection failed: %v", err)
			}
			switch {
			case tc.replyErr == "" && replyErr != nil:
				t.Fatalf("reply error %v", replyErr)
			case tc.replyErr != "" && (replyErr == nil || !strings.Contains(replyErr.Error(), tc.replyErr)):
				t.Fatalf("reply error %v, want one with %q", replyErr, tc.replyErr)
			case tc.replyErr == "" && !slices.Equal(dst[:n], tc.want):
				t.Fatalf("read %v, want %v", dst[:n], tc.want)
			}
			var re redis.Error
			if replyErr != nil && !errors.As(replyErr, &re) {
				t.Fatalf("reply error %T is not a redis.Error", replyErr)
			}
			// The stream is still in step: the next reply reads whole.
			if n, replyErr, err := readReply(rd, &dst, true); err != nil || replyErr != nil || n != 5 || dst[0] != 9 {
				t.Fatalf("next reply: %v %v %v (%v)", dst[:n], replyErr, err, n)
			}
		})
	}
}

// TestDirectOnlyForOneServer: workers open connections of their own to a
// single server only. A Sentinel client (the master moves; go-redis follows
// the Sentinels), a Cluster client and options a plain connection would not
// honour keep go-redis's pipelines.
func TestDirectOnlyForOneServer(t *testing.T) {
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	creds := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", CredentialsProvider: func() (string, string) { return "u", "p" }})
	hook := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", OnConnect: func(context.Context, *redis.Conn) error { return nil }})
	for _, c := range []interface{ Close() error }{one, failover, cluster, creds, hook} {
		t.Cleanup(func() { _ = c.Close() })
	}
	if directFor(one) == nil {
		t.Error("single server: want the workers' own connections")
	}
	for name, c := range map[string]BatchClient{"sentinel": failover, "cluster": cluster, "credentials provider": creds, "OnConnect": hook} {
		if directFor(c) != nil {
			t.Errorf("%s: want go-redis pipelines", name)
		}
	}
}

// TestPipeTLSACLAndDatabase: a worker's own connection speaks TLS,
// authenticates as an ACL user and selects the client's database, as
// go-redis does; a wrong password fails the call with Redis's refusal.
func TestPipeTLSACLAndDatabase(t *testing.T) {
	srv := redistest.StartTLS(t, "--user", "gateway", "on", ">s3cret", "~*", "+@all")
	certPEM := srv.CertPEM
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := func(password string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr,
			Username: "gateway", Password: password, DB: 3, Protocol: 2, DisableIdentity: true,
			TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := Bucket{Key: Key("shop-a", "tls"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}

	good := NewBatcher(client("s3cret"), BatcherOptions{})
	t.Cleanup(func() { _ = good.Close() })
	if good.direct == nil {
		t.Fatal("a single server over TLS: want the workers' own connections")
	}
	for want := int64(9); want >= 7; want-- {
		r, err := good.Take(ctx, b, 1, 1)
		if err != nil || r.Granted != 1 || r.Remaining != want {
			t.Fatalf("take: %+v %v, want a token and %d left", r, err, want)
		}
	}
	// The bucket is in database 3, where go-redis's own commands go.
	hash, _ := Storage(b.Key)
	if n, err := client("s3cret").Exists(ctx, hash).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s in database 3: %d %v", hash, n, err)
	}
	if n, err := srv.Client(t).Exists(ctx, hash).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS %s in database 0: %d %v, want 0", hash, n, err)
	}

	bad := NewBatcher(client("wrong"), BatcherOptions{})
	t.Cleanup(func() { _ = bad.Close() })
	if _, err := bad.Take(ctx, b, 1, 1); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v, want Redis's WRONGPASS", err)
	}
}

// TestPipeRedialsAfterRedisClosedIt: Redis closes connections idle longer
// than its timeout; the next pipeline must not be lost on the dead
// connection (a failed call would count towards opening the breaker).
func TestPipeRedialsAfterRedisClosedIt(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--timeout", "1"))
	bt := NewBatcher(srv.Client(t), BatcherOptions{Workers: 1})
	t.Cleanup(func() { _ = bt.Close() })
	ctx := context.Background()
	b := Bucket{Key: Key("shop-a", "idle"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if _, err := bt.Take(ctx, b, 1, 1); err != nil {
		t.Fatal(err)
	}
	// Redis checks idle clients about every 100ms (hz 10).
	time.Sleep(2500 * time.Millisecond)
	if r, err := bt.Take(ctx, b, 1, 1); err != nil || r.Remaining != 8 {
		t.Fatalf("after Redis closed the idle connection: %+v %v, want a token and 8 left", r, err)
	}
}

// TestPipeDropsAConnectionOutOfStep: bytes that are not RESP fail the
// pipeline's calls and the connection; the next pipeline dials a new one.
// A fake server: no real Redis writes malformed replies.
func TestPipeDropsAConnectionOutOfStep(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		replies := []string{"*5\r\n:1\r\n:garbage\r\n", "*8\r\n:1\r\n:4\r\n:0\r\n:100\r\n:1700000000000\r\n:0\r\n:1074790400\r\n:1700000000000\r\n"}
		for i := 0; ; i++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(reply string) {
				defer conn.Close()
				rd := bufio.NewReader(conn)
				for {
					// One EVALSHA per pipeline here: read its array.
					line, err := readLine(rd)
					if err != nil {
						return
					}
					if err := skipElems(rd, line, 0); err != nil {
						return
					}
					if _, err := conn.Write([]byte(reply)); err != nil {
						return
					}
				}
			}(replies[min(i, 1)])
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	bt := NewBatcher(c, BatcherOptions{Workers: 1, Timeout: 5 * time.Second})
	t.Cleanup(func() { _ = bt.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := Bucket{Key: Key("shop-a", "garbled"), Capacity: 5, RefillTokens: 1, RefillPeriodMs: 3600_000}
	if _, err := bt.Take(ctx, b, 1, 1); !errors.Is(err, errProtocol) {
		t.Fatalf("malformed reply: %v, want %v", err, errProtocol)
	}
	if r, err := bt.Take(ctx, b, 1, 1); err != nil || r.Granted != 1 || r.Remaining != 4 {
		t.Fatalf("on a new connection: %+v %v, want the reply read", r, err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPipeKeepsNoHugeBuffer: a batch resent with the script's text (after
// Redis lost its scripts) needs a large write buffer; the worker does not
// keep it for the pipelines after.
func TestPipeKeepsNoHugeBuffer(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	bt := NewBatcher(c, BatcherOptions{Workers: 1, Timeout: 5 * time.Second})
	t.Cleanup(func() { _ = bt.Close() })
	p := &pipe{opts: bt.direct, bt: bt}
	t.Cleanup(p.close)
	calls := make([]call, 64)
	for i := range calls {
		o := &op{b: Bucket{Key: Key("tenant-"+strconv.Itoa(i), "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 1000}, cost: 1, want: 1}
		calls[i] = call{cost: 1, want: 1}
		calls[i].one[0] = o
		calls[i].ops = calls[i].one[:]
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	if n := p.exec(calls, passFirst, LayoutPacked, deadline); n != len(calls) {
		t.Fatalf("sent %d calls, want %d", n, len(calls))
	}
	for i := range calls {
		if !isNoScript(calls[i].err) {
			t.Fatalf("call %d after SCRIPT FLUSH: %v, want NOSCRIPT", i, calls[i].err)
		}
	}
	if n := p.exec(calls, passNoScript, LayoutPacked, deadline); n != len(calls) {
		t.Fatalf("resent %d calls, want %d", n, len(calls))
	}
	for i := range calls {
		if calls[i].err != nil || calls[i].n != 8 || calls[i].reply[0] != 1 {
			t.Fatalf("call %d resent with EVAL: %v %v", i, calls[i].reply[:calls[i].n], calls[i].err)
		}
	}
	if cap(p.wbuf) > maxKeptBuffer {
		t.Fatalf("the worker keeps a %d-byte buffer after the resend, want at most %d", cap(p.wbuf), maxKeptBuffer)
	}
}
