package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
)

func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (hack/install-deps.sh)")
	}
}

// The operations keep every key: a slot moved with its keys, a master
// added and the slots rebalanced onto it, a master failed over to its
// replica; after each, every node agrees and every key reads back.
func TestOperationsKeepKeys(t *testing.T) {
	needRedis(t)
	c, err := StartWith(t.TempDir(), Options{Masters: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	ms, err := c.Masters()
	if err != nil || len(ms) != 3 {
		t.Fatalf("%d masters, %v", len(ms), err)
	}
	if top, _ := c.Topology(); len(top) != 6 || top[5].Master || top[5].MasterID == "" {
		t.Fatalf("want 3 masters and 3 replicas, got %d nodes", len(top))
	}
	ctx := context.Background()
	cc := c.Client()
	defer cc.Close()
	const n = 300
	for i := range n {
		if err := cc.Set(ctx, fmt.Sprintf("k:{%d}", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		for i := range n {
			if v, err := cc.Get(ctx, fmt.Sprintf("k:{%d}", i)).Int(); err != nil || v != i {
				t.Fatalf("%s: k:{%d} = %d, %v", when, i, v, err)
			}
		}
	}

	slot, err := c.Slot("k:{7}")
	if err != nil {
		t.Fatal(err)
	}
	from, _ := c.Owner(slot)
	to := ms[0].Addr
	if to == from.Addr {
		to = ms[1].Addr
	}
	if err := c.MoveSlot(ctx, slot, to, MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitAgree(); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.Owner(slot); o.Addr != to {
		t.Fatalf("slot %d owned by %s after the move, want %s", slot, o.Addr, to)
	}
	check("after the move")

	added, err := c.AddMaster()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Rebalance(); err != nil {
		t.Fatal(err)
	}
	ms, _ = c.Masters()
	if len(ms) != 4 {
		t.Fatalf("%d masters after adding one", len(ms))
	}
	for _, m := range ms {
		if m.Addr == added.Addr() && len(m.Slots) < 3000 {
			t.Fatalf("the new master serves %d slots after the rebalance", len(m.Slots))
		}
	}
	check("after the rebalance")

	promoted, err := c.Failover(from.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if promoted == from.Addr {
		t.Fatal("failover returned the old master")
	}
	check("after the failover")
}
