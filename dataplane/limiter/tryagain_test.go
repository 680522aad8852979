package limiter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testutil/redistest"
)

// TestTryAgainResendsOnlyTheRefusedCalls: in a Redis Cluster, a slot being
// migrated answers TRYAGAIN to a call whose keys exist only in part (the
// bucket's hash is there, its 0.1 key is not). In a pipeline whose first
// call gets it, go-redis would send the whole pipeline again, calls that
// ran included, and take their tokens twice; the Batcher's calls are not
// resent by go-redis (noRetry), and only the refused call is the
// Batcher's to send again.
func TestTryAgainResendsOnlyTheRefusedCalls(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	nodes := cl.Nodes()
	shards, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := func(key string) (int, *redistest.Server) {
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shards {
			for _, n := range nodes {
				if int(slot) >= s.Start && int(slot) <= s.End && s.Nodes[0].Addr == n.Addr() {
					return int(slot), n
				}
			}
		}
		t.Fatalf("no owner of %s", key)
		return 0, nil
	}
	// Two tenants on one master: a (whose slot migrates) and b.
	slotA, m := owner(Key("a", "r"))
	b := ""
	for i := 0; b == ""; i++ {
		name := "b" + strconv.Itoa(i)
		if _, n := owner(Key(name, "r")); n == m {
			b = name
		}
	}
	var other *redistest.Server
	for _, n := range nodes {
		if n != m && other == nil {
			other = n
		}
	}
	bucket := func(tenant string) Bucket {
		return Bucket{Key: Key(tenant, "r"), Capacity: 10, RefillTokens: 1, RefillPeriodMs: 3600_000, node: m.Addr()}
	}
	bt := NewBatcher(cc, BatcherOptions{Workers: 1, Timeout: 5 * time.Second, ExecTimeout: 5 * time.Second, MaxWait: 5 * time.Second})
	t.Cleanup(func() { _ = bt.Close() })
	for _, tenant := range []string{"a", b} {
		if _, err := bt.Take(ctx, bucket(tenant), 1, 1); err != nil {
			t.Fatalf("first take of %s: %v", tenant, err)
		}
	}
	otherID, err := other.Client(t).ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	mc := m.Client(t)
	if err := mc.Do(ctx, "CLUSTER", "SETSLOT", slotA, "MIGRATING", otherID).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Do(context.Background(), "CLUSTER", "SETSLOT", slotA, "STABLE").Err() })

	w := &worker{bt: bt}
	calls := make([]call, 2)
	for i, tenant := range []string{"a", b} {
		o := &op{b: bucket(tenant), cost: 1, want: 1}
		calls[i] = call{cost: 1, want: 1}
		calls[i].one[0] = o
		calls[i].ops = calls[i].one[:]
	}
	if n := w.execRedis(calls, passFirst, time.Now().Add(5*time.Second)); n != 2 {
		t.Fatalf("sent %d calls, want 2", n)
	}
	if !isTryAgain(calls[0].err) {
		t.Fatalf("a's call in its migrating slot: %v, want TRYAGAIN", calls[0].err)
	}
	if calls[1].err != nil || calls[1].reply[0] != 1 || calls[1].reply[1] != 8 {
		t.Fatalf("b's call: %v %v, want 1 granted, 8 left", calls[1].reply[:calls[1].n], calls[1].err)
	}
	if n := w.execRedis(calls, passTryAgain, time.Now().Add(5*time.Second)); n != 1 {
		t.Fatalf("resent %d calls, want a's only", n)
	}
	if err := mc.Do(ctx, "CLUSTER", "SETSLOT", slotA, "STABLE").Err(); err != nil {
		t.Fatal(err)
	}
	r, err := bt.Take(ctx, bucket(b), 1, 1)
	if err != nil || r.Remaining != 7 {
		t.Fatalf("b after the pipelines: %+v %v, want 7 left (its call ran once)", r, err)
	}
	if r, err := bt.Take(ctx, bucket("a"), 1, 1); err != nil || r.Remaining != 8 {
		t.Fatalf("a once its slot is stable: %+v %v, want 8 left (the refused calls took nothing)", r, err)
	}
}
