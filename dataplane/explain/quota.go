package explain

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/dataplane/limiter"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// Quota is the calendar quota of the rule in force, for the period that
// holds this gateway's time now.
type Quota struct {
	// Limit is the quota this gateway enforces (the region's share) per
	// Period ("Day", "Week" or "Month") in TimeZone.
	Limit    int64  `json:"limit"`
	Period   string `json:"period"`
	TimeZone string `json:"timeZone"`
	// Start and End bound the period (RFC 3339, in the zone).
	Start string `json:"start"`
	End   string `json:"end"`
	// Keys count the period in Redis: one, or one per shard (each holds
	// its part of the quota).
	Keys []string `json:"keys"`
	// Used is the period's count in Redis (all keys), Remaining what is
	// left of Limit; both unknown (0) with Error set or without Redis.
	Used      int64  `json:"used"`
	Remaining int64  `json:"remaining"`
	Error     string `json:"error,omitempty"`
}

// quotaOf describes rule's quota over buckets (their Quota keys) at now,
// reading the counts with GET (read-only); nil for a rule without one.
func quotaOf(ctx context.Context, c redis.UniversalClient, rule *snapshot.Rule, buckets []limiter.Bucket, now time.Time) *Quota {
	if !rule.HasQuota() || len(buckets) == 0 || buckets[0].Quota.Key == "" {
		return nil
	}
	loc, err := rule.QuotaLocation()
	if err != nil {
		loc = time.UTC
	}
	q := &Quota{Limit: buckets[0].Quota.Whole, Period: rule.QuotaPeriod.String(), TimeZone: rule.QuotaZone}
	var start, end int64
	for _, b := range buckets {
		var key string
		key, start, end = b.Quota.Counter(now.UnixMilli())
		q.Keys = append(q.Keys, key)
		if c == nil || q.Error != "" {
			continue
		}
		n, err := c.Get(ctx, key).Float64()
		if err != nil && !errors.Is(err, redis.Nil) {
			q.Error = err.Error()
			continue
		}
		q.Used += int64(n)
	}
	q.Start = time.UnixMilli(start).In(loc).Format(time.RFC3339)
	q.End = time.UnixMilli(end).In(loc).Format(time.RFC3339)
	if c != nil && q.Error == "" {
		q.Remaining = max(0, q.Limit-q.Used)
	}
	return q
}
