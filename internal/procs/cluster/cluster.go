// Package cluster launches a local Redis Cluster of redis-server processes
// for tests and the benchmark harness (the demo needs one server only, so
// this stays out of the tollgate binary).
package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tollgate-dev/tollgate/internal/procs"
)

// readyTimeout is how long a new cluster may take to report ok.
const readyTimeout = 20 * time.Second

// Cluster is a set of redis-server processes joined into a Redis Cluster by
// Start. Every node is a master and there are no replicas.
type Cluster struct {
	nodes []*procs.Redis
}

// Start starts masters redis-server processes in cluster mode, joins
// them with "redis-cli --cluster create", and waits until every node reports
// cluster_state:ok with all 16384 slots assigned; their logs go to dir.
// Start fails, leaving no node running, if the cluster does not form.
// The caller ends the nodes with Kill.
func Start(dir string, masters int) (_ *Cluster, err error) {
	if masters < 1 {
		return nil, fmt.Errorf("cluster.Start needs at least 1 master, got %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli was not found on PATH; run hack/install-deps.sh to install Redis (%w)", err)
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Kill()
		}
	}()
	for i := 0; i < masters; i++ {
		n, err := procs.StartRedis(procs.RedisConfig{Dir: dir, Log: fmt.Sprintf("redis-%d.log", i), Cluster: true})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	// A background context: this only bounds a hung redis-cli, it is not tied to the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli %s: %w\n%s%s", strings.Join(args, " "), err, procs.Tail(string(out)), c.logs())
	}

	if err := c.waitReady(); err != nil {
		return nil, fmt.Errorf("%w%s", err, c.logs())
	}
	return c, nil
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, n := range c.nodes {
		n.Kill()
	}
}

// Addrs returns the "127.0.0.1:port" address of every node.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the servers that make up the cluster, so a test can pause,
// kill or restart single nodes. A restarted node reads its nodes-<port>.conf
// again, so it rejoins with the same identity and slots but without data.
func (c *Cluster) Nodes() []*procs.Redis {
	return append([]*procs.Redis(nil), c.nodes...)
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
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
	}
	var last string
	for {
		ok := true
		for _, n := range c.nodes {
			info, err := clusterInfo(n)
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.Addr(), err)
				break
			}
			for k, v := range want {
				if info[k] != v {
					ok, last = false, fmt.Sprintf("%s: %s is %q, want %q", n.Addr(), k, info[k], v)
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", readyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
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
