// Package redistest runs real redis-server processes for tests: it wraps
// internal/procs, which also serves the benchmark harness and the demo,
// with testing.TB.
//
// Start launches a single server on a free loopback port and StartCluster
// launches several servers joined into a Redis Cluster. Every process is
// killed when the test that started it ends. Servers keep no data on disk:
// persistence is turned off, so a restarted server always starts empty.
package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/procs"
	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
)

// Option changes how Start runs a server.
type Option func(*procs.RedisConfig)

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb"). They come after the helper's own arguments,
// so they can override them.
func WithArgs(extra ...string) Option {
	return func(c *procs.RedisConfig) { c.Args = append(c.Args, extra...) }
}

// WithConfig starts the server with a configuration file (the first
// argument), for example a Sentinel's, which it may rewrite.
func WithConfig(path string) Option {
	return func(c *procs.RedisConfig) { c.Conf = path }
}

// WithPort makes the server listen on port p instead of a free port chosen by
// the helper. Start fails the test if the port stays busy.
func WithPort(p int) Option {
	return func(c *procs.RedisConfig) { c.Port = p }
}

// Server is one redis-server process started by Start (see procs.Redis for
// Addr, Port, Pid, Running, Kill, Stop, Pause and Resume).
type Server struct {
	*procs.Redis
}

// Start runs redis-server on a free 127.0.0.1 port with persistence turned off
// and waits until it answers PING. The process is killed when the test ends.
// Start fails the test if redis-server is missing or does not come up.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := procs.RedisConfig{Dir: t.TempDir()}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := procs.StartRedis(cfg)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(r.Kill)
	return &Server{r}
}

// Client returns a go-redis client connected to the server. Unlike go-redis's
// default, the client honours context deadlines, so a call made with a short
// context timeout fails quickly. The client is closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.Redis.Client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ScriptCalls is the number of script calls (EVALSHA and EVAL) Redis has
// run on c's server since it started or since CONFIG RESETSTAT, from INFO
// commandstats.
func ScriptCalls(t testing.TB, c redis.Cmdable) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				calls, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				n += calls
			}
		}
	}
	return n
}

// Restart starts a fresh redis-server on the same port and with the same
// arguments, and waits until it answers PING. A server that is still running
// is killed first. The new server starts empty. Restart fails the test if the
// server does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Redis.Restart(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Cluster is a set of redis-server processes joined into a Redis Cluster by
// StartCluster (masters only) or StartClusterWith (replicas too). Its
// operations (MoveSlot, AddMaster, Rebalance, Failover) are cluster.Cluster's.
type Cluster struct {
	*cluster.Cluster
}

// StartCluster starts masters redis-server processes in cluster mode, joins
// them with "redis-cli --cluster create", and waits until every node reports
// cluster_state:ok with all 16384 slots assigned. All nodes are killed when
// the test ends. StartCluster fails the test if the cluster does not form.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	c, err := cluster.Start(t.TempDir(), masters)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Kill)
	return &Cluster{c}
}

// StartClusterWith is StartCluster with replicas (o.Replicas per master)
// and extra redis-server arguments.
func StartClusterWith(t testing.TB, o cluster.Options) *Cluster {
	t.Helper()
	c, err := cluster.StartWith(t.TempDir(), o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Kill)
	return &Cluster{c}
}

// Nodes returns the servers that make up the cluster, so a test can pause,
// kill or restart single nodes. A restarted node reads its nodes-<port>.conf
// again, so it rejoins with the same identity and slots but without data.
func (c *Cluster) Nodes() []*Server {
	nodes := c.Cluster.Nodes()
	out := make([]*Server, len(nodes))
	for i, n := range nodes {
		out[i] = &Server{n}
	}
	return out
}

// Client returns a go-redis cluster client that knows every node. Like
// Server.Client, it honours context deadlines. The client is closed when the
// test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := c.Cluster.Client()
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// quietClientLog drops go-redis's own log lines in tests: they kill and pause
// servers on purpose, and the client's dial errors would otherwise bury the
// test output (hundreds of lines per outage test). Failures still surface as
// errors returned to the code under test.
type quietClientLog struct{}

func (quietClientLog) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietClientLog{}) }
