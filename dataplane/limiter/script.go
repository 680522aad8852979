package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/lua"
)

// tokenBucket is the embedded script (lua/token_bucket.lua). It is sent by
// SHA (EVALSHA) and, when Redis answers NOSCRIPT (after a restart, a failover
// or SCRIPT FLUSH), once more with its text (EVAL), which caches it again.
var tokenBucket = redis.NewScript(lua.TokenBucket)

// The script's arguments are built and its reply parsed here only.

// Layout is how buckets are stored in Redis.
type Layout int

const (
	// LayoutPacked: a tenant's buckets are fields of one hash (see
	// Storage); a bucket still in the 0.1 form is moved on first use.
	LayoutPacked Layout = iota
	// LayoutCompat: also read and write the 0.1 form (a hash per bucket),
	// so that gateways of 0.1 and of this version share every bucket
	// during a rolling upgrade. Uses more memory; switch back to
	// LayoutPacked once no 0.1 gateway runs.
	LayoutCompat
)

// ParseLayout reads a --redis-layout value.
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "packed":
		return LayoutPacked, nil
	case "compat-0.1":
		return LayoutCompat, nil
	}
	return 0, fmt.Errorf("redis layout %q: want packed or compat-0.1", s)
}

// ScriptCall is the script's KEYS and ARGV for a Take of b: between cost
// and want tokens (in units of 1/b.Unit), given up after deadlineMs in
// Redis time (0: never), in layout. A bucket with Charge set makes the call
// a charge that may leave the bucket in debt (ARGV[10], the debt floor). Tools that call the script themselves
// (the benchmark) build their calls here too.
func ScriptCall(b *Bucket, cost, want, deadlineMs int64, layout Layout) (keys []string, args []any) {
	return new(scriptArgs).fill(b, cost, want, deadlineMs, layout)
}

// fill sets a to the arguments of ScriptCall and returns them.
func (a *scriptArgs) fill(b *Bucket, cost, want, deadlineMs int64, layout Layout) (keys []string, args []any) {
	hash, field := Storage(b.Key)
	*a = scriptArgs{keys: [5]string{hash, b.Key}, capacity: b.Capacity, ints: [6]int64{
		b.RefillTokens, b.RefillPeriodMs, cost, want, deadlineMs, max(1, b.Unit)}, field: field}
	var compat any = "0" // a constant in an interface: no allocation
	if layout == LayoutCompat {
		compat = "1"
	}
	i := &a.ints
	keys = a.keys[:2]
	args = append(a.argv[:0], &a.capacity, &i[0], &i[1], &i[2], &i[3], &i[4], &i[5], &a.field, compat)
	var debt any = ""
	if b.Charge {
		// ARGV[10]: charge cost unconditionally, down to -MaxDebt tokens.
		a.maxDebt = max(0, b.MaxDebt)
		debt = &a.maxDebt
	}
	if q := &b.Quota; q.Key != "" {
		keys = append(keys, q.counter(q.Start), q.counter(q.Switch))
		// ARGV[11] is reserved (request cost); "" is its default.
		args = append(args, debt, "", q.Limit, q.Start, q.Switch, q.End, q.Owed, q.OwedStart, q.ShiftMs)
	} else if b.Charge || b.Demand.Key != "" {
		args = append(args, debt)
	}
	if d := &b.Demand; d.Key != "" {
		keys = append(keys, d.Key)
		for len(args) < 18 {
			args = append(args, "") // no quota: ARGV[11..18] empty
		}
		// What the call's requests asked for: one request's cost for a
		// prefetch or a charge (the batch beyond it is not demand), every
		// request's for calls that several share (want of them).
		asked := want
		if b.Prefetch > 1 || b.Charge {
			asked = cost
		}
		a.demand = [5]int64{d.WindowMs, d.Slots, d.Percent, asked, d.Refused}
		dm := &a.demand
		args = append(args, &dm[0], &dm[1], &dm[2], &dm[3], &dm[4])
	}
	return keys, args
}

// scriptArgs holds one call's KEYS and ARGV. The arguments are pointers
// into it (go-redis writes *float64, *int64 and *string as their values),
// so a call costs one allocation rather than one per boxed argument (a
// quota's arguments, rarer, are boxed as they come).
type scriptArgs struct {
	keys     [5]string // the bucket's two, a quota's two, a demand ring
	capacity float64
	ints     [6]int64
	field    string
	maxDebt  float64
	demand   [5]int64
	argv     [23]any // 18 with a quota, 23 with a demand ring
}

// scriptCmd is one call of the script as a go-redis command, its
// arguments kept in it: the Batcher keeps one per call in the batch's one
// allocation, where go-redis's Script.EvalSha would copy the arguments
// into a slice of its own and box the SHA and every key.
type scriptCmd struct {
	args scriptArgs
	// argv is EVALSHA (or EVAL), the SHA (or the script), the number of
	// keys, the keys and the arguments: 3 + 5 + 23 at most (a quota and a
	// demand ring).
	argv [31]any
}

// Scripts by SHA and by text, for scriptCmd.
var (
	tokenBucketSHA = tokenBucket.Hash()
	tokenBucketSrc = lua.TokenBucket
)

// command returns the call of the script for a Take of b (see ScriptCall)
// by SHA, or with the script's text when withText.
func (s *scriptCmd) command(ctx context.Context, b *Bucket, cost, want, deadlineMs int64, layout Layout, withText bool) *redis.Cmd {
	keys, args := s.args.fill(b, cost, want, deadlineMs, layout)
	v := s.argv[:0]
	if withText {
		v = append(v, "eval", &tokenBucketSrc, len(keys))
	} else {
		v = append(v, "evalsha", &tokenBucketSHA, len(keys))
	}
	// The first key as a string: a Cluster client hashes it to find the
	// slot (a pointer would be hashed as text of its address). The others
	// are only written, and go-redis writes a *string as its value.
	v = append(v, keys[0])
	for i := 1; i < len(keys); i++ {
		v = append(v, &keys[i])
	}
	v = append(v, args...)
	cmd := redis.NewCmd(ctx, v...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// Storage is where the bucket named key lives in Redis: a field of a hash.
// The unsharded buckets of a tenant (rl:{tenant}:route[@region]) are the
// fields route[@region] of the hash rl:{tenant}, so they share one key's
// overhead (and one slot, by the hash tag); a shard's key (no braces) is a
// hash of its own with the field "s". Before tollgate 0.2 each bucket was a
// hash {tokens, ts} at key itself; the script moves such a bucket to its
// field the first time it runs on it.
func Storage(key string) (hash, field string) {
	if i := strings.Index(key, "}:"); i > 0 && strings.HasPrefix(key, "rl:{") {
		return key[:i+1], key[i+2:]
	}
	return key, "s"
}

// State is a bucket's stored state, as the script last wrote it (not
// refilled since).
type State struct {
	// Found is false when Redis holds nothing for the bucket (a full
	// bucket).
	Found bool
	// Tokens were left at UpdatedMs (Redis time, ms).
	Tokens    float64
	UpdatedMs int64
}

// Peek reads the stored state of the bucket named key without changing it
// (either layout). For tests and diagnostics.
func Peek(ctx context.Context, c redis.Cmdable, key string) (State, error) {
	hash, field := Storage(key)
	v, err := c.HGet(ctx, hash, field).Result()
	switch {
	case err == nil:
		if len(v) != 14 {
			return State{}, fmt.Errorf("bucket state: %d bytes, want 14", len(v))
		}
		b := []byte(v)
		bits := binary.LittleEndian.Uint64(b[:8])
		var ms int64
		for i := 13; i >= 8; i-- {
			ms = ms<<8 | int64(b[i])
		}
		return State{Found: true, Tokens: math.Float64frombits(bits), UpdatedMs: ms}, nil
	case !errors.Is(err, redis.Nil):
		return State{}, fmt.Errorf("bucket state: %w", err)
	}
	old, err := c.HMGet(ctx, key, "tokens", "ts").Result()
	if err != nil || old[0] == nil || old[1] == nil {
		return State{}, err
	}
	var st State
	st.Found = true
	if _, err := fmt.Sscan(old[0].(string), &st.Tokens); err != nil {
		return State{}, fmt.Errorf("bucket state (0.1 layout): %w", err)
	}
	if _, err := fmt.Sscan(old[1].(string), &st.UpdatedMs); err != nil {
		return State{}, fmt.Errorf("bucket state (0.1 layout): %w", err)
	}
	return st, nil
}

// errExpired is the reply of a call that reached Redis after its deadline:
// it took nothing, and its caller has given up already.
var errExpired = errors.New("reached Redis after its deadline")

// replyInts holds the integers of one script reply: {granted, remaining,
// wait, reset, now, tokens (low and high 32 bits), stored}, and three more
// with a quota.
type replyInts [11]int64

// bucketState is a bucket as the script stored it after one call (written
// by the call, or as the call found it): Stored tokens left at StoredMs,
// and Redis's time NowMs of the call. Every later call refills from the
// stored pair, so from it the Cache computes, to the bit, what the script
// would answer at a later Redis time (as long as nobody else takes).
// NowMs is 0 in an answer that did not come from the script.
type bucketState struct {
	stored   float64
	storedMs int64
	nowMs    int64
}

// tokensAt is the bucket's tokens at Redis time nowMs, refilled as the
// script refills them: from the stored pair, not before it (a clock that
// went backwards refills nothing), up to the capacity. The conversion
// keeps the product and the sum two roundings, as in the script (no
// fused multiply-add).
func (s *bucketState) tokensAt(b *Bucket, nowMs int64) float64 {
	perMs := float64(b.RefillTokens) / float64(b.RefillPeriodMs)
	elapsed := max(0, nowMs-s.storedMs)
	return min(b.Capacity, s.stored+float64(float64(elapsed)*perMs))
}

// parseReply reads the script's reply {granted, remaining, wait, reset, now,
// tokens low, tokens high, stored} and, for a call with a quota, {quota
// remaining, quota reset, quota short}; a call that reached Redis after
// its deadline gets {-1, 0, 0, 0, now}. Errors never quote the key: it
// holds a tenant id.
func parseReply(cmd *redis.Cmd) (TakeResult, int64, error) {
	var buf replyInts
	n, err := int64s(cmd, &buf)
	if err != nil {
		return TakeResult{}, 0, fmt.Errorf("token bucket script: %w", err)
	}
	return parseInts(buf[:n])
}

// result is the call's reply, as parseReply reads it.
func (c *call) result() (TakeResult, int64, error) {
	if c.err != nil {
		return TakeResult{}, 0, fmt.Errorf("token bucket script: %w", c.err)
	}
	return parseInts(c.reply[:c.n])
}

// parseInts reads the script's reply from its integers.
func parseInts(vals []int64) (TakeResult, int64, error) {
	if len(vals) == 5 && vals[0] < 0 {
		return TakeResult{}, vals[4], errExpired
	}
	if len(vals) != 8 && len(vals) != 11 {
		return TakeResult{}, 0, fmt.Errorf("token bucket script: %d values in reply, want 8 or 11", len(vals))
	}
	r := TakeResult{Granted: vals[0], Remaining: vals[1], WaitMs: vals[2], ResetMs: vals[3], state: bucketState{
		stored: math.Float64frombits(uint64(vals[6])<<32 | uint64(vals[5])), storedMs: vals[7], nowMs: vals[4]}}
	if len(vals) == 11 {
		r.Quota = QuotaResult{Set: true, Remaining: vals[8], ResetMs: vals[9], Short: vals[10] == 1}
	}
	return r, vals[4], nil
}

// int64s reads the integers of cmd's array reply into dst (on the
// caller's stack, where Cmd.Int64Slice would allocate); it returns how
// many there are, or cmd's error (as go-redis gave it).
func int64s(cmd *redis.Cmd, dst *replyInts) (int, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return 0, err
	}
	if len(vals) > len(dst) {
		return 0, fmt.Errorf("%d values in the reply, want at most %d", len(vals), len(dst))
	}
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return 0, fmt.Errorf("unexpected element type %T in the reply, want int64", v)
		}
		dst[i] = n
	}
	return len(vals), nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// deadlineSlackMs is added to a deadline sent in Redis time. Redis's clock
// is estimated from the time each reply carries (internal/lib/redistime),
// and the estimate never runs ahead of Redis's clock: a deadline errs
// early, if anything, and a call that misses it takes nothing (fewer
// admissions, never more); the slack covers the estimate's millisecond
// rounding.
const deadlineSlackMs = 2
