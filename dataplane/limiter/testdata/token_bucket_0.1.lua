-- tollgate token bucket: refill, take, store, in one atomic call.
--
-- KEYS[1]  the bucket's key, rl:{<tenant>}:<route>
-- ARGV[1]  capacity         bucket size, tokens (integer >= 1)
-- ARGV[2]  refill tokens    tokens added per refill period (integer >= 1)
-- ARGV[3]  refill period    milliseconds (integer >= 1)
-- ARGV[4]  cost             tokens this call needs at least (integer >= 1)
-- ARGV[5]  want             tokens to take at most when available (>= cost);
--                           equal to cost for one plain request, larger when
--                           a gateway takes a batch for several requests
-- ARGV[6]  deadline         Redis time (ms) after which the caller has given
--                           up; a call that runs later changes nothing and
--                           returns granted = -1. 0: no deadline.
--
-- Returns {granted, remaining, wait_ms, reset_ms, now_ms}:
--   granted    tokens taken: 0 (rejected), or between cost and want
--   remaining  tokens left after the call, floored
--   wait_ms    milliseconds until cost tokens exist after this call: for a
--              rejected call the wait before retrying, for a granted one
--              the wait before the next call of the same cost could pass
--              (0 when it could pass now; -1 if cost exceeds capacity)
--   reset_ms   milliseconds until the bucket is full again
--   now_ms     Redis's clock, so the gateway can express deadlines in it
--
-- The clock is Redis's own (TIME), never the caller's: gateways' clocks drift.
-- Redis 7 replicates scripts by their effects, so reading TIME is safe.
-- State is a hash {tokens, ts}; tokens may be fractional. Every write sets an
-- expiry of twice the time a full refill takes (at least one second), so an
-- idle bucket disappears and comes back full. A rejection writes no state but
-- extends a shorter expiry: after a rule changes to a slower refill, a bucket
-- that only sees rejections must not expire on the old rule's time and come
-- back full.

local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2]) / tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local deadline = tonumber(ARGV[6]) or 0

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A call that reaches Redis after its caller gave up (queued behind a frozen
-- server, say) must not take tokens nobody will use.
if deadline > 0 and now > deadline then
  return {-1, 0, 0, 0, now}
end

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
end

-- A clock that went backwards (failover to a replica) refills nothing.
local elapsed = now - ts
if elapsed < 0 then
  elapsed = 0
end
tokens = math.min(capacity, tokens + elapsed * per_ms)

-- Nothing is written on rejection: the stored state, refilled from its own
-- ts, gives the same tokens at any later time.
local ttl = math.max(1000, 2 * math.ceil(capacity / per_ms))
local granted = 0
if tokens >= cost then
  granted = math.min(want, math.floor(tokens))
  tokens = tokens - granted
  redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
elseif state[1] then
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
end

local wait = 0
if cost > capacity then
  wait = -1
elseif tokens < cost then
  wait = math.ceil((cost - tokens) / per_ms)
end

return {granted, math.floor(tokens), wait, math.ceil((capacity - tokens) / per_ms), now}
