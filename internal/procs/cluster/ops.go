package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/procs"
)

// opTimeout bounds one operation's wait for the cluster to agree again.
const opTimeout = 30 * time.Second

// NodeInfo is one node as CLUSTER NODES describes it.
type NodeInfo struct {
	ID   string
	Addr string // 127.0.0.1:port
	// Master is false for a replica, whose master is MasterID.
	Master   bool
	MasterID string
	// Slots are the slots the node serves (masters only), sorted.
	Slots []int
	// Failed: the node is flagged fail or pfail.
	Failed bool
}

// Topology is the cluster as a live node sees it: every node, masters
// first, each group sorted by address.
func (c *Cluster) Topology() ([]NodeInfo, error) {
	var errs []error
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		body, err := n.Query("CLUSTER NODES")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return parseNodes(body), nil
	}
	return nil, fmt.Errorf("CLUSTER NODES: no node answered: %w", errors.Join(errs...))
}

// parseNodes reads the reply of CLUSTER NODES.
func parseNodes(body string) []NodeInfo {
	var out []NodeInfo
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := NodeInfo{ID: f[0], Addr: addr, Master: strings.Contains(f[2], "master"),
			Failed: strings.Contains(f[2], "fail")}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			for i := a; i <= b; i++ {
				n.Slots = append(n.Slots, i)
			}
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Master != out[j].Master {
			return out[i].Master
		}
		return out[i].Addr < out[j].Addr
	})
	return out
}

// Masters are the nodes that serve slots now (a failed-over master's
// replica among them), by address.
func (c *Cluster) Masters() ([]NodeInfo, error) {
	top, err := c.Topology()
	if err != nil {
		return nil, err
	}
	var out []NodeInfo
	for _, n := range top {
		if n.Master && !n.Failed {
			out = append(out, n)
		}
	}
	return out, nil
}

// Slot is the hash slot of key (CLUSTER KEYSLOT, asked of a live node).
func (c *Cluster) Slot(key string) (int, error) {
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		rc := n.Client()
		s, err := rc.ClusterKeySlot(context.Background(), key).Result()
		rc.Close()
		if err == nil {
			return int(s), nil
		}
	}
	return 0, errors.New("CLUSTER KEYSLOT: no node answered")
}

// Owner is the master that serves slot.
func (c *Cluster) Owner(slot int) (NodeInfo, error) {
	ms, err := c.Masters()
	if err != nil {
		return NodeInfo{}, err
	}
	for _, m := range ms {
		i := sort.SearchInts(m.Slots, slot)
		if i < len(m.Slots) && m.Slots[i] == slot {
			return m, nil
		}
	}
	return NodeInfo{}, fmt.Errorf("no master serves slot %d", slot)
}

// MoveOptions say how MoveSlot moves a slot.
type MoveOptions struct {
	// Hold keeps the slot migrating this long twice: with every key still
	// on the old owner, and with every key moved but the slot not yet
	// handed over (the two states a long reshard spends its time in).
	Hold time.Duration
	// Batch is the keys per MIGRATE; default 10 (redis-cli's pipeline).
	Batch int
}

// MoveSlot moves slot and its keys to the master at to, the way
// "redis-cli --cluster reshard" does: CLUSTER SETSLOT IMPORTING on the new
// owner, MIGRATING on the old one, MIGRATE of its keys in batches, then
// SETSLOT NODE on both and on every other master.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to string, o MoveOptions) error {
	src, err := c.Owner(slot)
	if err != nil {
		return err
	}
	if src.Addr == to {
		return nil
	}
	ms, err := c.Masters()
	if err != nil {
		return err
	}
	dst, ok := findAddr(ms, to)
	if !ok {
		return fmt.Errorf("move slot %d: %s is not a master", slot, to)
	}
	srcC, dstC := nodeClient(src.Addr), nodeClient(dst.Addr)
	defer srcC.Close()
	defer dstC.Close()
	if err := dstC.Do(ctx, "cluster", "setslot", slot, "importing", src.ID).Err(); err != nil {
		return fmt.Errorf("move slot %d: SETSLOT IMPORTING on %s: %w", slot, dst.Addr, err)
	}
	if err := srcC.Do(ctx, "cluster", "setslot", slot, "migrating", dst.ID).Err(); err != nil {
		return fmt.Errorf("move slot %d: SETSLOT MIGRATING on %s: %w", slot, src.Addr, err)
	}
	if err := hold(ctx, o.Hold); err != nil {
		return err
	}
	if err := migrateKeys(ctx, srcC, slot, dst.Addr, o.Batch); err != nil {
		return fmt.Errorf("move slot %d: %w", slot, err)
	}
	if err := hold(ctx, o.Hold); err != nil {
		return err
	}
	return c.assign(ctx, slot, dst, src, ms)
}

// assign hands slot to dst: the new owner first, then the old one, then
// every other master, as redis-cli does.
func (c *Cluster) assign(ctx context.Context, slot int, dst, src NodeInfo, ms []NodeInfo) error {
	order := []NodeInfo{dst, src}
	for _, m := range ms {
		if m.ID != dst.ID && m.ID != src.ID {
			order = append(order, m)
		}
	}
	for _, m := range order {
		rc := nodeClient(m.Addr)
		err := rc.Do(ctx, "cluster", "setslot", slot, "node", dst.ID).Err()
		rc.Close()
		if err != nil {
			return fmt.Errorf("move slot %d: SETSLOT NODE on %s: %w", slot, m.Addr, err)
		}
	}
	return nil
}

// migrateKeys MIGRATEs every key of slot from src to the node at addr.
func migrateKeys(ctx context.Context, src *redis.Client, slot int, addr string, batch int) error {
	if batch <= 0 {
		batch = 10
	}
	host, port, _ := net.SplitHostPort(addr)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"migrate", host, port, "", 0, 10000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE to %s: %w", addr, err)
		}
	}
}

func hold(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func findAddr(ns []NodeInfo, addr string) (NodeInfo, bool) {
	for _, n := range ns {
		if n.Addr == addr {
			return n, true
		}
	}
	return NodeInfo{}, false
}

// nodeClient is a plain client of one node, for administrative commands.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2})
}

// AddMaster starts a new node, joins it to the cluster as a master without
// slots ("redis-cli --cluster add-node") and waits until every node knows
// it. Rebalance or MoveSlot then give it slots.
func (c *Cluster) AddMaster() (*procs.Redis, error) {
	live := c.Nodes()[0].Addr()
	n, err := c.startNode()
	if err != nil {
		return nil, err
	}
	if err := c.redisCLI("--cluster", "add-node", n.Addr(), live); err != nil {
		return nil, err
	}
	return n, c.WaitAgree()
}

// Rebalance spreads the slots evenly over the masters, the empty ones
// included ("redis-cli --cluster rebalance --cluster-use-empty-masters"),
// and waits until every node agrees on the new owners.
func (c *Cluster) Rebalance() error {
	ms, err := c.Masters()
	if err != nil {
		return err
	}
	if err := c.redisCLI("--cluster", "rebalance", ms[0].Addr, "--cluster-use-empty-masters"); err != nil {
		return err
	}
	return c.WaitAgree()
}

// Failover promotes a replica of the master at addr with CLUSTER FAILOVER
// (a manual failover: the master stops taking writes until its replica has
// caught up, then the roles swap) and waits until every node agrees. It
// returns the new master's address.
func (c *Cluster) Failover(addr string) (string, error) {
	top, err := c.Topology()
	if err != nil {
		return "", err
	}
	m, ok := findAddr(top, addr)
	if !ok || !m.Master {
		return "", fmt.Errorf("failover: %s is not a master", addr)
	}
	var replica string
	for _, n := range top {
		if !n.Master && n.MasterID == m.ID && !n.Failed {
			replica = n.Addr
			break
		}
	}
	if replica == "" {
		return "", fmt.Errorf("failover: %s has no replica", addr)
	}
	rc := nodeClient(replica)
	defer rc.Close()
	if err := rc.Do(context.Background(), "cluster", "failover").Err(); err != nil {
		return "", fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica, err)
	}
	deadline := time.Now().Add(opTimeout)
	for {
		if ms, err := c.Masters(); err == nil {
			if n, ok := findAddr(ms, replica); ok && len(n.Slots) > 0 {
				return replica, c.WaitAgree()
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("failover: %s not a master after %v%s", replica, opTimeout, c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitAgree waits until every running node reports cluster_state:ok, knows
// every node and sees the same owner for every slot.
func (c *Cluster) WaitAgree() error {
	deadline := time.Now().Add(opTimeout)
	for {
		last := c.disagreement()
		if last == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster does not agree after %v: %s%s", opTimeout, last, c.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// disagreement is "" when the running nodes agree, else what differs.
func (c *Cluster) disagreement() string {
	var nodes []*procs.Redis
	for _, n := range c.Nodes() {
		if n.Running() {
			nodes = append(nodes, n)
		}
	}
	want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": "16384", "cluster_known_nodes": strconv.Itoa(len(c.Nodes()))}
	if last := checkInfo(nodes, want); last != "" {
		return last
	}
	var first string
	for _, n := range nodes {
		body, err := n.Query("CLUSTER NODES")
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		if strings.Contains(body, "->-") || strings.Contains(body, "-<-") {
			return n.Addr() + " still has a slot migrating or importing"
		}
		view := slotView(parseNodes(body))
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Sprintf("%s sees other slot owners", n.Addr())
		}
	}
	return ""
}

// slotView is the slot owners of a CLUSTER NODES reply, as text.
func slotView(ns []NodeInfo) string {
	var b strings.Builder
	for _, n := range ns {
		if n.Master && len(n.Slots) > 0 {
			fmt.Fprintf(&b, "%s:%d-%d/%d;", n.Addr, n.Slots[0], n.Slots[len(n.Slots)-1], len(n.Slots))
		}
	}
	return b.String()
}
