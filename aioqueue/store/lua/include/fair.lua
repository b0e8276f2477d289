-- fair: the jobs of tenants (.options(tenant=...), record field tn), served round-robin
-- within each priority by take.lua. A tenant's ready job waits on its tenant's own list at
-- its priority, not on the queue's ready list; each priority level has a ring of the
-- tenants with jobs on their lists there that may start now. A take serves a ring's head
-- for its turn (its weight's worth of jobs), then moves it to the back; a tenant whose
-- list runs empty leaves the ring (and its list key goes with its last entry), so a take
-- costs the same however many tenants have nothing ready. Plain jobs pay nothing for this:
-- they stay on the queue's ready lists, which a level shares with its ring as one member
-- more ('') once it has one (take.lua). (enqueue.lua's hand-off of a new plain job to an
-- idle worker does not look at the tenants' lists: a worker idles only once nothing it may
-- take is ready, so no more than a tenant's job enqueued in the same round trip is passed.)
--
-- A tenant's limits (a cap on its jobs leased at once, a rate of starts) hold for every
-- worker: a tenant they hold leaves the rings as it comes up (its levels noted in held),
-- and goes back when a lease of it ends (fair_release: ack, reclaim) or its rate allows
-- (fair_wake_due: a take or a promotion once it is due), with wake-up tokens for its jobs.
--
-- The keys, all derived from the `tenants` key a script declares (core/keys.py names the
-- same):
--   tenants               ZSET   tenant -> a bound no lower than its queued jobs, for the
--                                ranking reads (top_tenants.lua sets it right as it reads);
--                                a tenant is a member while it has queued jobs
--   tenants:count         HASH   tenant -> its queued jobs (cancelled ones not counted)
--   tenants:ready         HASH   priority -> entries on the tenants' lists there (a
--                                cancelled job's until take skips it, as the skipped hash)
--   tenants:ring:<p>      LIST   the tenants that may start at priority p, in turn order;
--                                '' stands for the queue's ready list of p (take.lua)
--   tenants:jobs:<p>:<t>  LIST   tenant t's ready job ids at priority p, FIFO
--   tenants:turn          HASH   p -> jobs the head of ring p had in its turn so far;
--                                'plain:<p>' -> 1 while '' is on ring p
--   tenants:running       HASH   tenant -> its jobs leased now (no field at 0); kept only
--                                while tenants:limits exists (the caps are what need it:
--                                setting the first limit recounts it, recount_tenants.lua)
--   tenants:held          HASH   tenant -> the priorities it left the rings at while its
--                                limits held it ('' if none yet): present while held
--   tenants:due           ZSET   tenant held by its rate -> when it may start (ms)
--   tenants:rate:<t>      STRING tenant t's rate's TAT (include/gcra.lua), expiring
--   tenants:weights       HASH   tenant -> its weight: jobs per turn (absent: 1)
--   tenants:limits        HASH   tenant -> "<max_running> <interval_us> <burst>" (0: none);
--                                field '' -> the default of every tenant without its own
-- @include gcra
-- @include notify
-- @include ready

local FAIR_TOKENS = 1000 -- the most wake-up tokens a tenant's return pushes

-- The fair keys of a queue, from the `tenants` key its script declares. `notify`: where
-- the wake-up tokens of a tenant's return go; `now_us`: the Redis clock. A key's name is
-- made when first used (a plain job's script names two at most).
local FAIR_KEYS = {
  count = ':count', ready = ':ready', turn = ':turn', running = ':running', held = ':held',
  due = ':due',
  weights = ':weights', limits = ':limits', ring_prefix = ':ring:', jobs_prefix = ':jobs:',
  rate_prefix = ':rate:',
}
local FAIR_NAMES = {__index = function(F, name)
  local suffix = FAIR_KEYS[name]
  if not suffix then return nil end
  local key = F.tenants .. suffix
  rawset(F, name, key)
  return key
end}
local function fair_context(tenants, notify, now_us)
  return setmetatable({tenants = tenants, notify = notify, now_us = now_us, known = {}},
    FAIR_NAMES)
end

-- Tenant t's list of ready jobs at priority `level` (0..9).
local function fair_list(F, level, tenant)
  return F.jobs_prefix .. level .. ':' .. tenant
end

-- A tenant's limits, {max_running, interval_us, burst} (0: none), its own or the default;
-- false if it has none. Read once per call.
local function tenant_limits(F, tenant)
  local limits = F.known[tenant]
  if limits == nil then
    local fields = redis.call('HMGET', F.limits, tenant, '')
    local c, u, b = string.match(fields[1] or fields[2] or '', '^(%d+) (%d+) (%d+)$')
    limits = c ~= nil and {tonumber(c), tonumber(u), tonumber(b)}
    F.known[tenant] = limits
  end
  return limits
end

-- How many of the tenant's jobs may start now (math.huge: no limit); when none may, the ms
-- at which its rate allows one (0: its cap holds it, until a lease of it ends). With a
-- rate, also the TAT and late_us to spend it from (gcra_spend).
local function tenant_room(F, tenant)
  local limits = tenant_limits(F, tenant)
  if not limits then return math.huge, 0 end
  local room = math.huge
  if limits[1] > 0 then
    room = limits[1] - tonumber(redis.call('HGET', F.running, tenant) or 0)
    if room <= 0 then return 0, 0 end
  end
  if limits[2] == 0 then return room, 0 end
  local allowed, tat, late_us = gcra_allowed(F.rate_prefix .. tenant, F.now_us, limits[2],
    limits[3])
  if allowed <= 0 then return 0, gcra_next_ms(tat, limits[2], limits[3]) end
  return math.min(room, allowed), 0, tat, late_us
end

-- A tenant's queued jobs changed by `delta` (+1: one made ready; less: taken or
-- cancelled). The count is exact in tenants:count, an O(1) update; the tenants ZSET's score
-- is only raised to it, never lowered (a take would pay an O(log n) move per job, the one
-- cost that grew with the number of tenants), so it stays an upper bound that the ranking
-- reads set right. The tenant leaves both with its last queued job.
local function count_queued(F, tenant, delta)
  local count = redis.call('HINCRBY', F.count, tenant, delta)
  if count <= 0 then
    redis.call('HDEL', F.count, tenant)
    redis.call('ZREM', F.tenants, tenant)
  elseif delta > 0 then
    redis.call('ZADD', F.tenants, 'GT', count, tenant)
  end
end

-- Job `id` of `tenant` is ready at `priority`: on its tenant's list there (at the front
-- with `front`), and the tenant on that level's ring if its list was empty, unless its
-- limits hold it (then the level is noted for its return). The caller pushes the job's
-- wake-up token.
local function fair_push(F, id, priority, tenant, front)
  local level = ready_level(priority)
  local length = redis.call(front and 'LPUSH' or 'RPUSH', fair_list(F, level, tenant), id)
  redis.call('HINCRBY', F.ready, level, 1)
  count_queued(F, tenant, 1)
  if length == 1 then
    local levels = redis.call('HGET', F.held, tenant)
    if levels then -- (not noted yet: its list was empty)
      redis.call('HSET', F.held, tenant, levels .. level)
    else
      redis.call('RPUSH', F.ring_prefix .. level, tenant)
    end
  end
end

-- A job made ready: on its tenant's list if it has one (`tenant`: its field tn), else on
-- the ready list of its priority (KEYS[ready_first + priority]).
local function push_ready(F, ready_first, id, priority, tenant, front)
  if tenant then
    fair_push(F, id, priority, tenant, front)
  else
    redis.call(front and 'LPUSH' or 'RPUSH', ready_key(ready_first, priority), id)
  end
end

-- A tenant's jobs held by its limits may start again: it goes back on the rings it left,
-- with wake-up tokens for what it may start now; if they still hold it, it stays held (by
-- its rate: due when that allows a start).
local function fair_unhold(F, tenant)
  local levels = redis.call('HGET', F.held, tenant)
  if not levels then return end
  local room, due = tenant_room(F, tenant)
  if room <= 0 then
    if due > 0 then redis.call('ZADD', F.due, due, tenant) end
    return
  end
  redis.call('HDEL', F.held, tenant)
  redis.call('ZREM', F.due, tenant)
  local ready = 0
  for level in string.gmatch(levels, '%d') do
    local entries = redis.call('LLEN', fair_list(F, level, tenant))
    if entries > 0 then
      redis.call('RPUSH', F.ring_prefix .. level, tenant)
      ready = ready + entries
    end
  end
  push_tokens(F.notify, math.min(ready, room, FAIR_TOKENS))
end

-- Whether running jobs are counted now: only while some limit exists (looked at once a call).
local function counts_running(F)
  if F.counting == nil then F.counting = redis.call('EXISTS', F.limits) == 1 end
  return F.counting
end

-- A lease of the tenant's ended (settled, or reclaimed): one fewer running, which may let
-- it start again.
local function fair_release(F, tenant)
  if counts_running(F) and redis.call('HINCRBY', F.running, tenant, -1) <= 0 then
    redis.call('HDEL', F.running, tenant)
  end
  fair_unhold(F, tenant)
end

-- Tenants held by their rate whose time has come (by `now`, ms) go back, up to `limit`.
-- Returns when the next is due (ms), or -1.
local function fair_wake_due(F, now, limit)
  local due = redis.call('ZRANGEBYSCORE', F.due, '-inf', now, 'LIMIT', 0, limit)
  for i = 1, #due do
    redis.call('ZREM', F.due, due[i])
    fair_unhold(F, due[i])
  end
  local head = redis.call('ZRANGE', F.due, 0, 0, 'WITHSCORES')
  return tonumber(head[2] or -1)
end
