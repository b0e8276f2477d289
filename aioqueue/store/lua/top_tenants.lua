--[[ top_tenants: the tenants with the most queued jobs, most first, with their jobs
running and whether their limits hold them now. A take lowers a tenant's exact count
(tenants:count) but not its score in the tenants ZSET, which stays an upper bound
(include/fair.lua): this reads the ZSET by score, highest first, looks up each tenant's
exact count, and stops once no score left can beat the `want`-th count found. The scores it
found stale it sets right, so the next read stops sooner. Reads O(want) tenants when the
scores are fresh; after a long drain, as many as were drained since the last read.
Running jobs come from tenants:running while some limit exists; with none, that count is
not kept (include/fair.lua), and they are counted from the active set: O(active).

KEYS[1]  active      ZSET  job id -> lease deadline (ms)
KEYS[2]  job_prefix        prefix of job records; carries the queue's hash tag
KEYS[3]  tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1]  want        how many tenants, from the first (an offset is the caller's slice)

Returns {tenant, queued, running, held (1 or 0), ...}, most queued first (ties in no set
order).
]]
-- @include fair
local active, job_prefix, tenants = KEYS[1], KEYS[2], KEYS[3]
local want = tonumber(ARGV[1])
if want <= 0 then return {} end
local F = fair_context(tenants, nil, 0)
local PAGE = math.max(want, 100)

local best = {} -- {tenant, count}, most first: at most `want`
local function place(tenant, count)
  local at = #best + 1
  while at > 1 and best[at - 1][2] < count do at = at - 1 end
  if at <= want then
    table.insert(best, at, {tenant, count})
    best[want + 1] = nil
  end
end

local stale, offset = {}, 0
repeat
  local entries = redis.call('ZREVRANGE', tenants, offset, offset + PAGE - 1, 'WITHSCORES')
  local ended = #entries < 2 * PAGE
  for i = 1, #entries, 2 do
    local tenant, bound = entries[i], tonumber(entries[i + 1])
    if #best >= want and bound <= best[want][2] then ended = true break end
    local count = tonumber(redis.call('HGET', F.count, tenant) or 0)
    if count ~= bound then stale[#stale + 1] = {tenant, count} end
    if count > 0 then place(tenant, count) end
  end
  offset = offset + PAGE
until ended

for _, entry in ipairs(stale) do -- (after the reads: a score set meanwhile moves ranks)
  if entry[2] > 0 then
    redis.call('ZADD', tenants, 'XX', entry[2], entry[1])
  else
    redis.call('ZREM', tenants, entry[1])
  end
end

local leased = nil -- tenant -> its jobs leased now, counted here when no limit exists
if #best > 0 and redis.call('EXISTS', F.limits) == 0 then
  leased = {}
  for _, entry in ipairs(best) do leased[entry[1]] = 0 end
  for _, id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
    local owner = redis.call('HGET', job_prefix .. id, 'tn')
    if owner and leased[owner] then leased[owner] = leased[owner] + 1 end
  end
end

local out = {}
for _, entry in ipairs(best) do
  local running = leased and leased[entry[1]]
    or tonumber(redis.call('HGET', F.running, entry[1]) or 0)
  local held = redis.call('HEXISTS', F.held, entry[1])
  out[#out + 1] = entry[1]
  out[#out + 1] = entry[2]
  out[#out + 1] = running
  out[#out + 1] = held
end
return out
