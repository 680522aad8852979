-- tollgate stacked limits: several token buckets decided together, all or
-- nothing, in one atomic call. Every bucket is decided by token_bucket.lua
-- itself, which runs here as the function take(KEYS, ARGV) (lua.go puts
-- its text in front of this one): the same refill from Redis's clock, the
-- same clamped integer arithmetic, the same storage and expiry.
--
-- The buckets must share one Redis Cluster slot (the gateway sends a call
-- only then: a tenant's buckets share the hash tag {<tenant>}), or live on
-- one server. Plain takes only: no quota, shards, region share or batch;
-- no bucket twice (both would pass the first pass on the same tokens).
--
-- KEYS[2i-1], KEYS[2i]  bucket i's KEYS[1] and KEYS[2] of token_bucket.lua
-- ARGV[1]   n          the number of buckets (>= 1)
-- ARGV[2]   deadline   as token_bucket.lua's ARGV[6]: Redis time (ms) after
--                      which the caller has given up; 0: none
-- ARGV[3]   compat     as token_bucket.lua's ARGV[9]
-- then for bucket i, ARGV[3 + 6(i-1) + 1 .. 6]:
--   capacity, refill tokens, refill period (ms), cost  as ARGV[1..4] there
--   field               as ARGV[8] there
--   enforce             "1": a refusal of this bucket refuses the request;
--                       "0": a Shadow limit, which only reports
--
-- First every bucket is decided without taking (token_bucket.lua's dry
-- mode). When every enforcing bucket admits, each is then taken for real,
-- in one script still: nothing ran in between, and Redis's clock only
-- moved forward, which refills, so each admits again (a Shadow bucket that
-- refused refuses again and takes nothing). Otherwise nothing is taken.
--
-- Returns {refused, <bucket 1's reply>, ..., <bucket n's reply>}: refused
-- is the first enforcing bucket that refused (1-based), 0 when every one
-- admitted; each bucket's reply is token_bucket.lua's 8 integers, of the
-- take when refused is 0, else of the untaken bucket (granted is what the
-- bucket alone would have taken: its verdict; nothing was). A call that
-- reached Redis after its deadline gets token_bucket.lua's {-1, 0, 0, 0,
-- now} and takes nothing.

local n = tonumber(ARGV[1])

-- at is where bucket i's arguments start, less one.
local function at(i)
  return 3 + 6 * (i - 1)
end

-- bucket is bucket i's KEYS and ARGV for take, dry or not.
local function bucket(i, dry, deadline)
  local a = at(i)
  local cost = ARGV[a + 4]
  return {KEYS[2 * i - 1], KEYS[2 * i]},
    {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], cost, cost, deadline, '1', ARGV[a + 5], ARGV[3], [24] = dry}
end

local replies, refused = {}, 0
for i = 1, n do
  local r = take(bucket(i, '1', ARGV[2]))
  if r[1] < 0 then
    return r
  end
  -- Refused: fewer than cost granted, and the bucket enforces.
  if refused == 0 and r[1] < tonumber(ARGV[at(i) + 4]) and ARGV[at(i) + 6] == '1' then
    refused = i
  end
  replies[i] = r
end

if refused == 0 then
  -- The deadline held for the first pass: the second must take from all.
  for i = 1, n do
    replies[i] = take(bucket(i, '', '0'))
  end
end

local out = {refused}
for i = 1, n do
  for _, v in ipairs(replies[i]) do
    table.insert(out, v)
  end
end
return out
