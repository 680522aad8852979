-- tollgate token bucket: refill, take, store, in one atomic call.
--
-- KEYS[1]  the hash that holds the bucket: rl:{<tenant>} (all of a tenant's
--          unsharded buckets, one field each), or the shard's own key
--          rl:<tenant>:<route>[@<region>]:<i>
-- KEYS[2]  where the bucket lived before (tollgate 0.1: a hash {tokens, ts}
--          at rl:{<tenant>}:<route>, or the shard's key); read once when
--          the field does not exist yet, then removed, so that a bucket
--          does not come back full at an upgrade. Same slot as KEYS[1].
-- ARGV[1]  capacity         bucket size, tokens (> 0, may be fractional)
-- ARGV[2]  refill tokens    tokens added per refill period (integer >= 1)
-- ARGV[3]  refill period    milliseconds (integer >= 1)
-- ARGV[4]  cost             tokens this call needs at least (integer >= 1);
--                           negative: give -cost tokens back, up to the
--                           capacity, and off the quota period's count,
--                           never below zero (a request spread over the
--                           shards of a bucket that did not get all it
--                           needed, or one refused a concurrency slot after
--                           its decision; the gateway then passes the
--                           period the take counted in as the only one,
--                           A ending never, so the refund counts there)
-- ARGV[5]  want             tokens to take at most when available (>= cost);
--                           equal to cost for one plain request, larger when
--                           a gateway takes a batch for several requests
-- ARGV[6]  deadline         Redis time (ms) after which the caller has given
--                           up; a call that runs later changes nothing and
--                           returns granted = -1. 0: no deadline.
-- ARGV[7]  unit             cost, want and granted count 1/unit tokens
--                           (1: whole tokens). A request spread over the
--                           shards of a bucket takes fractions of a token,
--                           so that shards of 2.5 tokens can serve a cost
--                           of 10.
-- ARGV[8]  field            the bucket's field in KEYS[1]: <route>[@<region>],
--                           or "s" for a shard
-- ARGV[9]  compat           "1" while gateways of 0.1 may still run (a
--                           rolling upgrade): the 0.1 form is read too (the
--                           lower of the two, both refilled to now, wins)
--                           and written too, so old and new gateways share
--                           one bucket. "0": the 0.1 form is read only when
--                           the field is missing, and then removed.
-- ARGV[10] debt floor       optional. Absent or "": the call is the
--                           ordinary take above. A number d >= 0: the call
--                           charges cost unconditionally (a response's
--                           cost, known after the request was admitted):
--                           the tokens may drop below zero, a debt, but
--                           never below -d; the charge is cut at that
--                           floor. granted is what was charged (in units);
--                           want is ignored. A bucket in debt admits
--                           nothing until it refills above the cost of the
--                           next request, and wait_ms says when.
-- ARGV[11]                 reserved (request cost); "" or absent
--
-- A calendar quota (optional: with ARGV[12] absent or empty the script
-- ignores KEYS[3..4] and ARGV[12..18] and replies as without them) is a
-- second limit both must admit. It counts tokens in KEYS[3] or KEYS[4],
-- one key per period, named by the period's start:
-- rq:{<tenant>}:<route>[@<region>]:<start ms> (or rq:{<shard key>}:<start
-- ms> for a shard, which holds its part of the quota), in the slot of
-- KEYS[1] by the hash tag. The gateway computes periods from the rule's
-- time zone (ms since the epoch, so daylight saving changes are its
-- calendar's); the script picks the one that holds Redis's time, so every
-- gateway switches periods at the same instant. A counter expires a minute
-- after its period ends.
-- KEYS[3]  counter of period A          KEYS[4]  counter of period B
-- ARGV[12] quota limit      tokens per period (integer >= 0)
-- ARGV[13] A start (ms)     the period that held the gateway's time less a
-- ARGV[14] A end = B start  minute, and the next one: Redis's time falls in
-- ARGV[15] B end (ms)       one of them while clocks agree within a minute
--                           (beyond, the nearer of the two is used)
-- ARGV[16] owed             tokens a gateway admitted on its own while Redis
-- ARGV[17] owed start (ms)  was unreachable, in the period starting there:
--                           added to that period's count first (if it is A
--                           or B and not over), whatever this call decides
-- ARGV[18] shift (ms)       added to Redis's time for the quota only; tests
--                           move the calendar with it, gateways send 0
--
-- Region demand (optional: with ARGV[19] absent or empty nothing is
-- recorded; gateways set it for rules split between regions whose shares
-- follow the traffic, docs/regions.md). The call adds the tokens it
-- admitted and refused to the region's demand ring, the last key of the
-- call (KEYS[3], or KEYS[5] with a quota): rd:{<tag of KEYS[1]>}:<rule>@<region>,
-- in KEYS[1]'s slot. The ring is a hash of ARGV[20] fields "0".."n-1",
-- one per window of ARGV[19] ms (the window number modulo n), each
-- "<window>:<admitted>:<refused>:<share>", a field of an older window
-- being reset when its slot comes round again, and the fields "w" (the
-- window) and "n" (the slots), for readers. Its expiry is set when a window starts: twice the
-- ring. Fixed size per rule, region and tag; no extra round trip.
-- ARGV[19] window (ms)      length of a window
-- ARGV[20] slots            windows in the ring
-- ARGV[21] share            the region's share in force (percent) in the
--                           gateway that calls: a window's largest, so that
--                           the rebalancer sees when every gateway enforces
--                           a lowered share
-- ARGV[22] asked            tokens (in units) the call's requests asked
--                           for: cost, times the requests sharing the call
--                           (a prefetch asks for its request's cost only);
--                           asked less granted counts as refused
-- ARGV[23] refused before   tokens the gateway refused on its own since its
--                           last call of the bucket (its empty-bucket
--                           cache), counted as refused here
--
-- ARGV[24] dry              "1": decide without taking (the first pass of
--                           token_bucket_stack.lua, which takes only when
--                           every bucket of a stack admits): granted is
--                           what the call would take, and the tokens,
--                           remaining and wait are the bucket's untaken.
--                           Only for a take without a quota. Absent or
--                           "": take.
--
-- Returns {granted, remaining, wait_ms, reset_ms, now_ms, tokens_lo,
-- tokens_hi, stored_ms}, and with a quota {..., quota_remaining,
-- quota_reset_ms, quota_short}:
--   granted    tokens taken (in units): 0 (rejected), or between cost and want
--   remaining  tokens left after the call, floored
--   wait_ms    milliseconds until cost tokens exist after this call: for a
--              rejected call the wait before retrying, for a granted one
--              the wait before the next call of the same cost could pass
--              (0 when it could pass now; -1 if cost exceeds capacity)
--   reset_ms   milliseconds until the bucket is full again
--   now_ms     Redis's clock, so the gateway can express deadlines in it
--   tokens_lo, tokens_hi, stored_ms
--              the bucket's state as stored after the call (written by it,
--              or as it was): the tokens (a double, as the low and high 32
--              bits of its IEEE 754 form: a reply holds integers) left at
--              Redis time stored_ms, from which every later call refills.
--              A gateway that knows them computes what this script would
--              answer at a later time, to the bit (its empty-bucket cache)
--   quota_remaining  tokens left in the period after the call, floored
--   quota_reset_ms   milliseconds until the period ends
--   quota_short      1 when the quota holds fewer than cost tokens after
--                    the call (a rejected call: the quota refused it, and
--                    wait_ms is the time to the next period, or -1 when
--                    cost exceeds the limit), else 0
--
-- The clock is Redis's own (TIME), never the caller's: gateways' clocks drift.
-- Redis 7 replicates scripts by their effects, so reading TIME is safe.
--
-- A bucket's state is 14 bytes packed in its field: tokens (a double: they
-- may be fractional) and the time of the last write (ms, 6 bytes). Small
-- hashes are stored compactly by Redis (listpack), so a tenant's buckets
-- share one key's overhead. Expiry is the key's: every write makes it live
-- at least twice the time a full refill of this bucket takes (at least one
-- second), never shortening it for the other fields. A field that outlives
-- its own refill time is read as a full bucket, which it is: idle fields
-- need no expiry of their own. A rejection writes no state but extends the
-- expiry the same way: after a rule changes to a slower refill, a bucket
-- that only sees rejections must not expire on the old rule's time and come
-- back full.
--
-- Numbers handed to Redis: Redis reads a Lua number in a command's
-- arguments as its text with 17 significant digits, so 1e17 and above come
-- as "1.728e+17", which PEXPIRE refuses (the call, and the script, would
-- fail on every call of the bucket). Every expiry is therefore a whole
-- number of milliseconds written with '%d' (ms()), at most MAX_TTL_MS: 200
-- years, within a Go Duration (292 years). A bucket whose full refill
-- takes longer than 100 years (the RateLimitRule schema allows up to 2^53
-- ms, whose arithmetic stays exact here) is forgotten after 200 idle
-- years, and comes back full. The other numbers handed to Redis stay far below 1e17: a bucket's
-- tokens and Redis's time (the 0.1 form, stored as text), and a quota's
-- counts (INCRBYFLOAT, which reads exponents too).

local MAX_TTL_MS = 6307200000000

-- ms is an expiry of n milliseconds as PEXPIRE reads it: whole, at least
-- 1, at most MAX_TTL_MS, in integer notation.
local function ms(n)
  return string.format('%d', math.max(1, math.min(MAX_TTL_MS, math.ceil(n))))
end

local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2]) / tonumber(ARGV[3])
local unit = tonumber(ARGV[7]) or 1
local cost = tonumber(ARGV[4]) / unit
local want = tonumber(ARGV[5]) / unit
local deadline = tonumber(ARGV[6]) or 0
local debt_floor = tonumber(ARGV[10] or '')
local dry = ARGV[24] == '1'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A call that reaches Redis after its caller gave up (queued behind a frozen
-- server, say) must not take tokens nobody will use.
if deadline > 0 and now > deadline then
  return {-1, 0, 0, 0, now}
end

-- The quota: which period holds Redis's time, what is left in it.
local qkey, qend, qleft, qnow
local qlimit = ARGV[12] and ARGV[12] ~= '' and tonumber(ARGV[12]) or nil
if qlimit then
  qnow = now + (tonumber(ARGV[18]) or 0)
  local a0, a1, b1 = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
  local owed, ostart = tonumber(ARGV[16]) or 0, tonumber(ARGV[17]) or 0
  if owed > 0 then
    local okey, oend
    if ostart == a0 then
      okey, oend = KEYS[3], a1
    elseif ostart == a1 then
      okey, oend = KEYS[4], b1
    end
    if okey and qnow < oend then
      redis.call('INCRBYFLOAT', okey, owed)
      redis.call('PEXPIRE', okey, ms(oend - qnow + 60000))
    end
  end
  if qnow >= a1 then
    qkey, qend = KEYS[4], b1
  else
    qkey, qend = KEYS[3], a1
  end
  qleft = math.max(0, qlimit - (tonumber(redis.call('GET', qkey)) or 0))
end

-- qcharge adds n tokens (negative: gives them back) to the period's count.
local function qcharge(n)
  if n > 0 then
    redis.call('INCRBYFLOAT', qkey, n)
    redis.call('PEXPIRE', qkey, ms(math.max(1, qend - qnow) + 60000))
  elseif n < 0 and qleft < qlimit then
    redis.call('INCRBYFLOAT', qkey, math.max(n, qleft - qlimit))
  end
  qleft = math.min(qlimit, math.max(0, qleft - n))
end

-- demand adds admitted and refused tokens (whole tokens, not units) to
-- the region's demand ring (ARGV[19..23]), if the call records demand.
local dwin = tonumber(ARGV[19] or '')
local function demand(admitted, refused)
  if not dwin or dwin <= 0 then
    return
  end
  local dkey = KEYS[#KEYS]
  local slots = tonumber(ARGV[20])
  local win = math.floor(now / dwin)
  local field = tostring(win % slots)
  local a, r, s = 0, 0, 0
  local old = redis.call('HGET', dkey, field)
  local w, oa, orf, os
  if old then
    w, oa, orf, os = string.match(old, '^(%d+):([^:]+):([^:]+):(%d+)$')
  end
  if w and tonumber(w) == win then
    a, r, s = tonumber(oa), tonumber(orf), tonumber(os)
  else
    redis.call('HSET', dkey, 'w', dwin, 'n', slots)
    redis.call('PEXPIRE', dkey, ms(2 * dwin * slots))
  end
  a = a + admitted
  r = r + refused + (tonumber(ARGV[23]) or 0)
  s = math.max(s, tonumber(ARGV[21]) or 0)
  redis.call('HSET', dkey, field, string.format('%d:%.17g:%.17g:%d', win, a, r, s))
end

-- The bucket's state as stored: set once it is read, and by store().
local stored, stored_ms

-- reply appends the stored state and, when there is a quota, the quota's
-- entries.
local function reply(r)
  local lo, hi = struct.unpack('<I4I4', struct.pack('<d', stored))
  table.insert(r, lo)
  table.insert(r, hi)
  table.insert(r, stored_ms)
  if qkey then
    local short = 0
    if qleft + 1e-9 < cost then
      short = 1
      if cost > qlimit then
        r[3] = -1
      elseif r[3] >= 0 then
        r[3] = math.max(r[3], qend - qnow)
      end
    end
    table.insert(r, math.floor(qleft + 1e-6))
    table.insert(r, math.max(0, qend - qnow))
    table.insert(r, short)
  end
  return r
end

local field = ARGV[8]
local compat = ARGV[9] == '1'
local tokens, ts
local legacy = false
local packed = redis.call('HGET', KEYS[1], field)
if packed then
  tokens, ts = struct.unpack('<di6', packed)
end
if compat or not packed then
  local old = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
  local otokens, ots = tonumber(old[1]), tonumber(old[2])
  legacy = otokens ~= nil and ots ~= nil
  -- Both forms: the one with fewer tokens now is the one last charged.
  if legacy and (tokens == nil or
      otokens + math.max(0, now - ots) * per_ms < tokens + math.max(0, now - ts) * per_ms) then
    tokens, ts = otokens, ots
  end
end
local known = tokens ~= nil and ts ~= nil
if not known then
  tokens = capacity
  ts = now
end
stored, stored_ms = tokens, ts

-- A clock that went backwards (failover to a replica) refills nothing.
local elapsed = now - ts
if elapsed < 0 then
  elapsed = 0
end
tokens = math.min(capacity, tokens + elapsed * per_ms)

-- A bucket may owe up to floor tokens: its refill to full then takes
-- (capacity + floor) / rate, and the key must outlive it, or the debt
-- would be forgiven when it expires.
local ttl = math.min(MAX_TTL_MS, math.max(1000, 2 * math.ceil((capacity + math.max(0, debt_floor or 0)) / per_ms)))

-- extend makes key live at least ttl more milliseconds.
local function extend(key)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ms(ttl))
  end
end

-- store writes the bucket's state, and the 0.1 form too in compat mode
-- (else retires it).
local function store()
  redis.call('HSET', KEYS[1], field, struct.pack('<di6', tokens, now))
  stored, stored_ms = tokens, now
  extend(KEYS[1])
  if compat then
    redis.call('HSET', KEYS[2], 'tokens', tokens, 'ts', now)
    extend(KEYS[2])
  elseif legacy then
    if KEYS[2] == KEYS[1] then
      redis.call('HDEL', KEYS[1], 'tokens', 'ts')
    else
      redis.call('DEL', KEYS[2])
    end
  end
end

if cost < 0 then
  tokens = math.min(capacity, tokens - cost)
  store()
  demand(0, 0)
  if qkey then
    qcharge(cost)
    cost = 0
  end
  return reply({0, math.floor(tokens), 0, math.ceil((capacity - tokens) / per_ms), now})
end

-- The quota refuses first, and caps what a batch may take.
local qok, qcap = true, math.huge
if qkey then
  qok = qleft + 1e-9 >= cost
  qcap = math.floor(qleft * unit + 1e-6)
end

if debt_floor and cost >= 0 then
  local charge = math.max(0, math.min(cost, tokens + debt_floor))
  -- Whole units only, as for a take.
  charge = math.floor(charge * unit + 1e-6) / unit
  tokens = tokens - charge
  store()
  demand(charge, 0)
  local wait = 0
  if tokens < 1 / unit then
    wait = math.ceil((1 / unit - tokens) / per_ms)
  end
  if qkey then
    -- The quota counts the charge too, past its limit if need be: the
    -- period's next requests are refused until it ends.
    qcharge(charge)
    cost = 1 / unit
  end
  return reply({charge * unit, math.floor(tokens), wait, math.ceil((capacity - tokens) / per_ms), now})
end

-- Nothing is written on rejection: the stored state, refilled from its own
-- ts, gives the same tokens at any later time.
local granted = 0
if qok and tokens >= cost then
  -- Whole units only (tokens may be fractional); the epsilon keeps a
  -- float's rounding (2.9999999) from losing a unit.
  granted = math.min(want * unit, math.floor(tokens * unit + 1e-6), qcap)
  if not dry then
    tokens = tokens - granted / unit
    store()
    if qkey then
      qcharge(granted / unit)
    end
  end
else
  if legacy then
    extend(KEYS[2])
  end
  if packed then
    extend(KEYS[1])
  end
end

demand(granted / unit, math.max(0, (tonumber(ARGV[22]) or cost * unit) - granted) / unit)

local wait = 0
if cost > capacity then
  wait = -1
elseif tokens < cost then
  wait = math.ceil((cost - tokens) / per_ms)
end

return reply({granted, math.floor(tokens), wait, math.ceil((capacity - tokens) / per_ms), now})
