package concurrency

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Run renews the leases of this gateway's slots until ctx ends: every Tick
// it sends one pipeline with one script call per key whose renewal is due
// (a third of its lease after the last one), covering all of that key's
// slots. It returns at once without Redis, and nil when ctx ends.
func (s *Slots) Run(ctx context.Context) error {
	if s.opts.Client == nil {
		return nil
	}
	t := time.NewTicker(s.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.RenewDue(ctx, time.Now())
		}
	}
}

// renewal is one key's due renewal.
type renewal struct {
	key     string
	lease   time.Duration
	members []string
}

// due collects the keys whose renewal is due at now and schedules their next
// one.
func (s *Slots) due(now time.Time) []renewal {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rs []renewal
	for key, h := range s.held {
		if now.Before(h.next) {
			continue
		}
		h.next = now.Add(h.lease / 3)
		r := renewal{key: key, lease: h.lease, members: make([]string, 0, len(h.members))}
		for m := range h.members {
			r.members = append(r.members, m)
		}
		rs = append(rs, r)
	}
	return rs
}

// RenewDue renews the keys due at now in one pipeline and returns how many
// slots Redis still held (a slot whose lease ran out before the renewal,
// because Redis could not be reached for a whole lease, is gone). A key
// whose call failed is retried at the next tick.
func (s *Slots) RenewDue(ctx context.Context, now time.Time) (renewed int64, err error) {
	rs := s.due(now)
	if len(rs) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	cmds, err := s.renewPipeline(ctx, rs, false)
	if err != nil && isNoScript(err) {
		// Redis lost its script cache (a restart, a failover): send the
		// script itself once.
		cmds, err = s.renewPipeline(ctx, rs, true)
	}
	for i, c := range cmds {
		vals, cerr := c.Int64Slice()
		if cerr != nil || len(vals) == 0 {
			s.retrySoon(rs[i].key)
			continue
		}
		renewed += vals[0]
	}
	if s.opts.OnRenew != nil {
		s.opts.OnRenew(len(rs), err)
	}
	return renewed, err
}

// renewPipeline sends one renewal per key in one pipeline, by SHA or, with
// full, with the script's text.
func (s *Slots) renewPipeline(ctx context.Context, rs []renewal, full bool) ([]*redis.Cmd, error) {
	pipe := s.opts.Client.Pipeline()
	cmds := make([]*redis.Cmd, len(rs))
	for i, r := range rs {
		args := make([]any, 0, 2+len(r.members))
		args = append(args, "renew", strconv.FormatInt(r.lease.Milliseconds(), 10))
		for _, m := range r.members {
			args = append(args, m)
		}
		if full {
			cmds[i] = script.Eval(ctx, pipe, []string{r.key}, args...)
		} else {
			cmds[i] = script.EvalSha(ctx, pipe, []string{r.key}, args...)
		}
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// retrySoon makes key due again at the next tick.
func (s *Slots) retrySoon(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[key]; h != nil {
		h.next = time.Time{}
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
