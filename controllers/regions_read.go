package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/regionshares"
)

// scanBatch is the keys one SCAN step asks for, and one pipeline of
// HGETALLs reads.
const scanBatch = 500

// readRegion reads every demand ring of region in its Redis c (each
// master's, in a Cluster): per rule, the Reading of the interval that
// ends at Redis's time. since holds the start of each rule's change in
// progress, whose confirmations the reading looks for. Rings of another
// region, or that do not parse, are skipped.
func readRegion(ctx context.Context, c redis.UniversalClient, region string, interval time.Duration, since map[string]time.Time) (map[string]*regionshares.Reading, error) {
	now, err := c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	out := map[string]*regionshares.Reading{}
	var mu sync.Mutex // a Cluster's masters are scanned concurrently
	read := func(ctx context.Context, node redis.Cmdable) error {
		return scanRings(ctx, node, func(key string, fields map[string]string) {
			rule, reg, ok := regionshares.ParseKey(key)
			if !ok || reg != region {
				return
			}
			ring, err := regionshares.ParseRing(fields)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			rd := out[rule]
			if rd == nil {
				rd = &regionshares.Reading{}
				out[rule] = rd
			}
			rd.Add(ring, now, interval, since[rule])
		})
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return read(ctx, m) })
	} else {
		err = read(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanRings calls fn with every demand ring of node and its fields: SCAN,
// then one pipeline of HGETALL per batch of keys. A ring that expired
// between the two has no fields and is skipped.
func scanRings(ctx context.Context, node redis.Cmdable, fn func(key string, fields map[string]string)) error {
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, regionshares.KeyPrefix+"*", scanBatch).Result()
		if err != nil {
			return fmt.Errorf("SCAN: %w", err)
		}
		if len(keys) > 0 {
			cmds := make([]*redis.MapStringStringCmd, len(keys))
			_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					cmds[i] = p.HGetAll(ctx, k)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("HGETALL: %w", err)
			}
			for i, k := range keys {
				if fields := cmds[i].Val(); len(fields) > 0 {
					fn(k, fields)
				}
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
