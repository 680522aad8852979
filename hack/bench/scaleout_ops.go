package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/procs/cluster"
)

// SOOps is the operations pass: the Cluster's operations while the load
// runs, with the gateway's default deadlines.
type SOOps struct {
	Masters  int     `json:"masters"`
	Replicas int     `json:"replicasPerMaster"`
	Rate     int     `json:"rate"`
	Seconds  float64 `json:"seconds"`
	SOPassCounts
	Steps []SOOp `json:"steps"`
	// Tenants are the buckets the operations moved: admitted vs exact over
	// the whole pass.
	Tenants []SOTenantCount `json:"tenants"`
}

// SOPassCounts are a load's decisions against the exact count.
type SOPassCounts struct {
	Decisions int64   `json:"decisions"`
	Admitted  int64   `json:"admitted"`
	Exact     int64   `json:"exact"`
	Error     float64 `json:"error"`
	Local     int64   `json:"localDecisions"`
}

// SOOp is one window of the operations pass.
type SOOp struct {
	What      string  `json:"what"`
	From      float64 `json:"fromSeconds"` // since the load started
	To        float64 `json:"toSeconds"`
	Decisions int64   `json:"decisions"`
	// Local were decided off Redis: refused after a failed call (breaker
	// closed) or by the local buckets (open); LocalAdmitted of them passed.
	Local         int64  `json:"localDecisions"`
	LocalAdmitted int64  `json:"localAdmitted"`
	Note          string `json:"note,omitempty"`
}

// SOTenantCount is one bucket's admitted count against the exact one.
type SOTenantCount struct {
	Tenant   string `json:"tenant"`
	Why      string `json:"why"`
	Admitted int64  `json:"admitted"`
	Exact    int64  `json:"exact"`
	Local    int64  `json:"localDecisions"`
}

// soOperations runs the load on a cluster with a replica per master while
// a slot with live buckets migrates (held, as a long reshard is), a master
// joins and takes slots (redis-cli rebalance), and a master fails over.
func (h *harness) soOperations(ctx context.Context) (*SOOps, error) {
	p := h.plan
	const masters, replicas = 3, 1
	c, err := h.soCluster("scaleout-ops", masters, replicas)
	if err != nil {
		return nil, err
	}
	defer c.Kill()
	rules := newSORules(p.ScaleOutRate, true)
	gws, err := startSOGateways(ctx, c.Addrs(), p.ScaleOutGateways, rules, 0, 0)
	if err != nil {
		return nil, err
	}
	defer gws.close()
	if err := soWarmUp(ctx, gws); err != nil {
		return nil, err
	}
	res := &SOOps{Masters: masters, Replicas: replicas, Rate: p.ScaleOutRate}
	load := newSOLoad(p.ScaleOutRate, p.ScaleOutDur+time.Minute)
	running, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	load.start = time.Now() // before the goroutine: soRunOps reads it
	go func() {
		defer close(done)
		load.run(ctx, running, gws.engines, p.ScaleOutRate, newSOMix(h.cfg.seed, p.ScaleOutTenants).pick)
	}()
	steps, tenants, opErr := h.soRunOps(ctx, c, load)
	_ = sleep(ctx, time.Second)
	stop()
	<-done
	res.Seconds = round(time.Since(load.start).Seconds(), 2)
	if opErr != nil {
		return res, opErr
	}
	decs := load.decisions()
	res.count(decs, rules, steps, tenants)
	h.logf("scale-out operations: %d decisions, admitted %d vs exact %d (%+.2f %%), %d decided off Redis", res.Decisions, res.Admitted, res.Exact, 100*res.Error, res.Local)
	for _, s := range res.Steps {
		h.logf("  %-40s %5.1f–%5.1fs: %d decisions, %d off Redis (%d admitted) %s", s.What, s.From, s.To, s.Decisions, s.Local, s.LocalAdmitted, s.Note)
	}
	return res, nil
}

// soTarget is a tenant whose bucket an operation moves.
type soTarget struct {
	tenant int
	why    string
}

// soRunOps runs the operations one after the other and returns their
// windows (counts still empty) and the tenants they moved.
func (h *harness) soRunOps(ctx context.Context, c *cluster.Cluster, load *soLoad) ([]SOOp, []soTarget, error) {
	since := func() float64 { return time.Since(load.start).Seconds() }
	var steps []SOOp
	step := func(what string, f func() (string, error)) error {
		from := since()
		note, err := f()
		steps = append(steps, SOOp{What: what, From: round(from, 2), To: round(since(), 2), Note: note})
		return err
	}
	lead := h.plan.ScaleOutDur / 3
	if err := step("steady (before the operations)", func() (string, error) { return "", sleep(ctx, lead) }); err != nil {
		return steps, nil, err
	}
	hold := h.plan.ScaleOutHold
	// The busiest unsharded tenants (the Zipf head) after the hot ones.
	moved, joined, failed := len(soHot), len(soHot)+1, len(soHot)+2
	if err := step("slot migration (held migrating)", func() (string, error) {
		return soMoveTenant(ctx, c, moved, "", hold)
	}); err != nil {
		return steps, nil, err
	}
	if err := step("add a master, move a slot to it, rebalance", func() (string, error) {
		n, err := c.AddMaster()
		if err != nil {
			return "", err
		}
		note, err := soMoveTenant(ctx, c, joined, n.Addr(), hold)
		if err != nil {
			return note, err
		}
		return note + "; then redis-cli --cluster rebalance --cluster-use-empty-masters", c.Rebalance()
	}); err != nil {
		return steps, nil, err
	}
	if err := step("manual failover (CLUSTER FAILOVER on the replica)", func() (string, error) {
		m, err := soOwner(c, failed)
		if err != nil {
			return "", err
		}
		to, err := c.Failover(m)
		return fmt.Sprintf("%s's master %s to its replica %s", soTenant(failed), m, to), err
	}); err != nil {
		return steps, nil, err
	}
	return steps, []soTarget{{moved, "its slot migrated"}, {joined, "its slot moved to the new master"}, {failed, "its master failed over"}}, nil
}

// soOwner is the master of tenant's unsharded bucket.
func soOwner(c *cluster.Cluster, tenant int) (string, error) {
	slot, err := c.Slot(fmt.Sprintf("rl:{%s}", soTenant(tenant)))
	if err != nil {
		return "", err
	}
	m, err := c.Owner(slot)
	return m.Addr, err
}

// soMoveTenant moves the slot of tenant's bucket to the master at to (""
// another master), held migrating for hold twice.
func soMoveTenant(ctx context.Context, c *cluster.Cluster, tenant int, to string, hold time.Duration) (string, error) {
	slot, err := c.Slot(fmt.Sprintf("rl:{%s}", soTenant(tenant)))
	if err != nil {
		return "", err
	}
	from, err := c.Owner(slot)
	if err != nil {
		return "", err
	}
	if to == "" {
		ms, err := c.Masters()
		if err != nil {
			return "", err
		}
		for _, m := range ms {
			if m.Addr != from.Addr {
				to = m.Addr
				break
			}
		}
	}
	note := fmt.Sprintf("slot %d (%s's bucket) %s → %s, held %s twice", slot, soTenant(tenant), from.Addr, to, hold)
	return note, c.MoveSlot(ctx, slot, to, cluster.MoveOptions{Hold: hold})
}

// count fills the pass's, the windows' and the tenants' counts.
func (r *SOOps) count(decs []soDecision, rules *soRules, steps []SOOp, tenants []soTarget) {
	exact := exactCount(decs, rules)
	per := map[int32]*SOTenantCount{}
	for _, t := range tenants {
		c := &SOTenantCount{Tenant: soTenant(t.tenant), Why: t.why, Exact: exact[int32(t.tenant)]}
		per[int32(t.tenant)] = c
	}
	for _, d := range decs {
		r.Decisions++
		at := float64(d.at) / 1e9
		for i := range steps {
			if s := &steps[i]; at >= s.From && at < s.To {
				s.Decisions++
				if d.local {
					s.Local++
					if d.allowed {
						s.LocalAdmitted++
					}
				}
			}
		}
		if d.allowed {
			r.Admitted++
		}
		if d.local {
			r.Local++
		}
		if c := per[d.tenant]; c != nil {
			if d.allowed {
				c.Admitted++
			}
			if d.local {
				c.Local++
			}
		}
	}
	for _, n := range exact {
		r.Exact += n
	}
	r.Error = relErr(r.Admitted, r.Exact)
	r.Steps = steps
	for _, t := range tenants {
		r.Tenants = append(r.Tenants, *per[int32(t.tenant)])
	}
}
