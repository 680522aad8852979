// Package cluster launches a local Redis Cluster of redis-server processes
// for tests and the benchmark harness (the demo needs one server only, so
// this stays out of the tollgate binary), and runs the Cluster's own
// operations on it while traffic flows: moving slots with their keys,
// adding a master, failing a master over to its replica (ops.go).
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate-dev/tollgate/internal/procs"
)

// readyTimeout is how long a new cluster may take to report ok.
const readyTimeout = 20 * time.Second

// Cluster is a set of redis-server processes joined into a Redis Cluster by
// Start or StartWith: masters, and replicas when asked for.
type Cluster struct {
	dir  string
	args []string
	cli  string

	mu    sync.Mutex
	nodes []*procs.Redis
}

// Options say how StartWith builds a cluster.
type Options struct {
	// Masters is the number of masters, at least 1.
	Masters int
	// Replicas is the number of replicas of each master.
	Replicas int
	// Args are extra redis-server arguments for every node.
	Args []string
}

// Start starts masters redis-server processes in cluster mode, joins
// them with "redis-cli --cluster create", and waits until every node reports
// cluster_state:ok with all 16384 slots assigned; their logs go to dir.
// Start fails, leaving no node running, if the cluster does not form.
// The caller ends the nodes with Kill.
func Start(dir string, masters int) (*Cluster, error) {
	return StartWith(dir, Options{Masters: masters})
}

// StartWith is Start with replicas and extra arguments: o.Masters masters,
// each with o.Replicas replicas ("redis-cli --cluster create
// --cluster-replicas").
func StartWith(dir string, o Options) (_ *Cluster, err error) {
	if o.Masters < 1 {
		return nil, fmt.Errorf("cluster.Start needs at least 1 master, got %d", o.Masters)
	}
	if o.Replicas < 0 {
		return nil, fmt.Errorf("cluster.Start: %d replicas", o.Replicas)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli was not found on PATH; run hack/install-deps.sh to install Redis (%w)", err)
	}
	c := &Cluster{dir: dir, args: o.Args, cli: cli}
	defer func() {
		if err != nil {
			c.Kill()
		}
	}()
	for range o.Masters * (1 + o.Replicas) {
		if _, err := c.startNode(); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	if err := c.redisCLI(args...); err != nil {
		return nil, err
	}
	if err := c.waitReady(); err != nil {
		return nil, fmt.Errorf("%w%s", err, c.logs())
	}
	return c, c.waitRoles(o.Masters)
}

// waitRoles waits until every node sees masters masters, the others
// replicas: "redis-cli --cluster create" returns before every replica has
// told the cluster whose replica it is.
func (c *Cluster) waitRoles(masters int) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ok := true
		for _, n := range c.Nodes() {
			body, err := n.Query("CLUSTER NODES")
			if err != nil || countMasters(parseNodes(body)) != masters {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster roles not settled after %v (want %d masters)%s", readyTimeout, masters, c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countMasters(ns []NodeInfo) int {
	n := 0
	for _, x := range ns {
		if x.Master {
			n++
		}
	}
	return n
}

// startNode starts one more redis-server in cluster mode, not yet part of
// the cluster, in a directory of its own: a replica writes the RDB of its
// full resync there (dump.rdb), which a node started later in the same
// directory would load.
func (c *Cluster) startNode() (*procs.Redis, error) {
	c.mu.Lock()
	i := len(c.nodes)
	c.mu.Unlock()
	dir := filepath.Join(c.dir, fmt.Sprintf("node-%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n, err := procs.StartRedis(procs.RedisConfig{Dir: dir, Log: "redis.log", Cluster: true, Args: c.args})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// redisCLI runs redis-cli with args.
func (c *Cluster) redisCLI(args ...string) error {
	// A background context: this only bounds a hung redis-cli, it is not tied to the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.cli, args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s%s", strings.Join(args, " "), err, procs.Tail(string(out)), c.logs())
	}
	return nil
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, n := range c.Nodes() {
		n.Kill()
	}
}

// Addrs returns the "127.0.0.1:port" address of every node, replicas
// included.
func (c *Cluster) Addrs() []string {
	nodes := c.Nodes()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the servers that make up the cluster, so a test can pause,
// kill or restart single nodes. A restarted node reads its nodes-<port>.conf
// again, so it rejoins with the same identity and slots but without data.
func (c *Cluster) Nodes() []*procs.Redis {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*procs.Redis(nil), c.nodes...)
}

// Node returns the server at addr, nil if it is not one of the cluster's.
func (c *Cluster) Node(addr string) *procs.Redis {
	for _, n := range c.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Client returns a go-redis cluster client that knows every node; the
// caller closes it. Like Redis.Client, it honours context deadlines.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// waitReady polls CLUSTER INFO on every node until each one reports a healthy
// cluster that it fully knows.
func (c *Cluster) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	nodes := c.Nodes()
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(nodes)),
	}
	for {
		last := checkInfo(nodes, want)
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", readyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkInfo returns "" when every node's CLUSTER INFO has the fields of
// want, else what differs first.
func checkInfo(nodes []*procs.Redis, want map[string]string) string {
	for _, n := range nodes {
		info, err := clusterInfo(n)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		for k, v := range want {
			if info[k] != v {
				return fmt.Sprintf("%s: %s is %q, want %q", n.Addr(), k, info[k], v)
			}
		}
	}
	return ""
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.Nodes() {
		fmt.Fprintf(&b, "\n--- log of %s (%s):\n%s", n.Addr(), n.LogPath(), n.LogTail())
	}
	return b.String()
}

// clusterInfo runs CLUSTER INFO on n and returns its fields.
func clusterInfo(n *procs.Redis) (map[string]string, error) {
	body, err := n.Query("CLUSTER INFO")
	if err != nil {
		return nil, err
	}
	info := map[string]string{}
	for _, line := range strings.Split(body, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}
