-- tollgate concurrency slots: acquire, renew and release the in-flight
-- slots of one (tenant, route), in one atomic call each.
--
-- KEYS[1]  the sorted set of slots: mi:{<tenant>}:<route>[@<region>]. The
--          braces are a Redis Cluster hash tag: a tenant's slots share the
--          slot of its token buckets (rl:{<tenant>}).
--          member = <gateway id>:<request id>, score = the slot's lease
--          expiry in Redis time (ms).
-- ARGV[1]  op: "acquire", "renew" or "release"
--
-- acquire  ARGV[2] member, ARGV[3] limit (slots, >= 1), ARGV[4] lease (ms),
--          ARGV[5] deadline: Redis time (ms) after which the caller has
--          given up (0 or absent: none)
--          Removes expired slots, counts the others and adds the member
--          with expiry now + lease if fewer than limit are held. A member
--          already held (a retried call) keeps its slot and gets a fresh
--          lease. A call that runs after its deadline (queued behind a
--          stalled server) takes nothing: the caller has answered without
--          it, and its release may already have run.
--          Returns {acquired (1, 0, or -1 past the deadline), held (after
--          the call), now_ms}.
-- renew    ARGV[2] lease (ms), ARGV[3..] members
--          Moves the expiry of each member that still holds a slot to
--          now + lease. A member whose slot expired (and was removed) is
--          not added back: that would exceed the limit.
--          Returns {renewed, now_ms}.
-- release  ARGV[2..] members
--          Removes the members' slots (ZREM: releasing twice is harmless).
--          Returns {released, now_ms}.
--
-- The clock is Redis's own (TIME), never the caller's: gateways' clocks
-- drift. Redis 7 replicates scripts by their effects, so reading TIME is
-- safe. The key itself expires one lease after its last write, so a set
-- whose gateways all died leaves nothing behind.
--
-- Redis reads a Lua number in a command's arguments as its text with 17
-- significant digits (1e17 and above in exponent notation, which PEXPIRE
-- refuses): an expiry goes through ms(), a whole number of milliseconds in
-- integer notation, at most MAX_TTL_MS (a lease is at most an hour; the
-- bound only keeps a bad argument from failing the script). Scores (ZADD,
-- ZREMRANGEBYSCORE) are read as doubles, exponents included.

local MAX_TTL_MS = 6307200000000

-- ms is an expiry of n milliseconds as PEXPIRE reads it: whole, at least
-- 1, at most MAX_TTL_MS, in integer notation.
local function ms(n)
  return string.format('%d', math.max(1, math.min(MAX_TTL_MS, math.ceil(n))))
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = KEYS[1]
local op = ARGV[1]

if op == 'acquire' then
  local member = ARGV[2]
  local limit = tonumber(ARGV[3])
  local lease = tonumber(ARGV[4])
  local deadline = tonumber(ARGV[5]) or 0
  if deadline > 0 and now > deadline then
    return {-1, 0, now}
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  if redis.call('ZSCORE', key, member) == false then
    if held >= limit then
      return {0, held, now}
    end
    held = held + 1
  end
  redis.call('ZADD', key, now + lease, member)
  -- Every lease in the set ends by now + lease: the set may expire then.
  if redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, ms(lease))
  end
  return {1, held, now}
end

if op == 'renew' then
  local lease = tonumber(ARGV[2])
  local renewed = 0
  for i = 3, #ARGV do
    if redis.call('ZSCORE', key, ARGV[i]) ~= false then
      redis.call('ZADD', key, 'XX', now + lease, ARGV[i])
      renewed = renewed + 1
    end
  end
  if renewed > 0 and redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, ms(lease))
  end
  return {renewed, now}
end

if op == 'release' then
  local released = 0
  for i = 2, #ARGV do
    released = released + redis.call('ZREM', key, ARGV[i])
  end
  return {released, now}
end

return redis.error_reply('concurrency.lua: unknown op ' .. tostring(op))
