-- tollgate reset: set one bucket, or its quota's count for the period that
-- holds Redis's time, to full or to a number of tokens, in one atomic call
-- (`tollgate reset`, the admin listener's POST /debug/reset). The keys are
-- those of token_bucket.lua, so one call covers one hash slot: a sharded
-- bucket takes one call per shard.
--
-- KEYS[1]  the hash that holds the bucket (rl:{<tenant>}, or a shard's key)
-- KEYS[2]  the bucket's 0.1 form (see token_bucket.lua)
-- KEYS[3]  with a quota: the counter of period A   KEYS[4]  of period B
-- ARGV[1]  capacity          bucket size, tokens (> 0, may be fractional)
-- ARGV[2]  refill tokens     per refill period (integer >= 1)
-- ARGV[3]  refill period     milliseconds (integer >= 1)
-- ARGV[4]  field             the bucket's field in KEYS[1]
-- ARGV[5]  compat            "1": write the 0.1 form too (a rolling upgrade
--                            from 0.1); "0": remove it
-- ARGV[6]  part              "bucket" or "quota"
-- ARGV[7]  tokens            what to leave: tokens in the bucket, or tokens
--                            left in the quota's period; "" for full (the
--                            capacity, or the whole quota: a count of 0)
-- ARGV[8]  quota limit       tokens per period (part "quota" only)
-- ARGV[9]  A start, ARGV[10] A end = B start, ARGV[11] B end (ms)
-- ARGV[12] shift (ms)        added to Redis's time for the quota; tests
--
-- Returns {before, after, now_ms}: the tokens the bucket held (refilled to
-- Redis's clock now, capped at the capacity; a bucket in debt is negative)
-- or the quota had left, and what it holds after the call, as strings
-- (tokens may be fractional). The clock is Redis's own, as in the token
-- bucket script.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2]) / tonumber(ARGV[3])
local field = ARGV[4]
local compat = ARGV[5] == '1'
local target = tonumber(ARGV[7] or '')

local function num(x)
  return string.format('%.17g', x)
end

if ARGV[6] == 'quota' then
  local limit = tonumber(ARGV[8])
  local qnow = now + (tonumber(ARGV[12]) or 0)
  local qkey, qend = KEYS[3], tonumber(ARGV[10])
  if qnow >= tonumber(ARGV[10]) then
    qkey, qend = KEYS[4], tonumber(ARGV[11])
  end
  local before = math.max(0, limit - (tonumber(redis.call('GET', qkey)) or 0))
  local after = math.max(0, math.min(limit, target or limit))
  if after >= limit then
    redis.call('DEL', qkey)
  else
    redis.call('SET', qkey, num(limit - after), 'PX', math.max(1, qend - qnow) + 60000)
  end
  return {num(before), num(after), now}
end

-- What the bucket holds now, read as the token bucket script reads it.
local tokens, ts
local packed = redis.call('HGET', KEYS[1], field)
if packed then
  tokens, ts = struct.unpack('<di6', packed)
end
local legacy = false
if compat or not packed then
  local old = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
  local otokens, ots = tonumber(old[1]), tonumber(old[2])
  legacy = otokens ~= nil and ots ~= nil
  if legacy and (tokens == nil or
      otokens + math.max(0, now - ots) * per_ms < tokens + math.max(0, now - ts) * per_ms) then
    tokens, ts = otokens, ots
  end
end
local before = capacity
if tokens ~= nil and ts ~= nil then
  before = math.min(capacity, tokens + math.max(0, now - ts) * per_ms)
end

local after = math.max(0, math.min(capacity, target or capacity))
if legacy or compat then
  if KEYS[2] == KEYS[1] then
    redis.call('HDEL', KEYS[1], 'tokens', 'ts')
  else
    redis.call('DEL', KEYS[2])
  end
end
if after >= capacity then
  -- Nothing stored is a full bucket.
  redis.call('HDEL', KEYS[1], field)
  return {num(before), num(capacity), now}
end
redis.call('HSET', KEYS[1], field, struct.pack('<di6', after, now))
local ttl = math.max(1000, 2 * math.ceil(capacity / per_ms))
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
if compat then
  redis.call('HSET', KEYS[2], 'tokens', after, 'ts', now)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {num(before), num(after), now}
