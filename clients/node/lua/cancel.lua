--[[ cancel: stop a job. A queued job is marked cancelled and its ready entry is skipped at
take time (O(1), no scan of the list; the skipped hash says how many such entries each
priority's lists hold, a tenant's included, so that counts stay true); a scheduled job
leaves the schedule (O(log n)); a running job is marked for abort (field ab) and its id is
published on the queue's abort channel, so that whichever worker runs it cancels its
asyncio task at once (workers that miss the message see the mark when they renew leases,
and reclaim honours it).

A job waiting (behind its group, or for its children) is cancelled at once. Whatever the
job was, its links follow (include/links.lua): its group passes on, its parents count it
as failed (a cancelled batch's callbacks get its counts so far).

KEYS[1]      job_prefix           prefix of job records; carries the queue's hash tag
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      skipped        HASH  priority -> ready entries of cancelled jobs
KEYS[4]      notify         LIST  wake-up tokens
KEYS[5]      schedule_wake  LIST  at most one token for pollers
KEYS[6..10]  links                the keys of include/links.lua, as QueueKeys.links():
             groups         HASH  group -> id of the job that holds it
             group_prefix         prefix of the groups' waiting lists
             inputs_prefix        prefix of the parents' inputs hashes
             handoff        ZSET  outcomes for parents on other queues, to deliver there
             waiting        STRING how many jobs wait (behind a group, or for children)
KEYS[11..20] ready          LIST  ready lists of priorities 0..9
KEYS[21]     tenants        ZSET  the tenants with queued jobs (a cancelled one no longer
                                  counts); the prefix of the fair keys (include/fair.lua)
ARGV[1] id
ARGV[2] result_ttl_ms  how long a cancelled scheduled record is kept (0: deleted). A
                       queued one keeps its record until take skips its ready entry.
ARGV[3] abort_channel  pub/sub channel of the queue's aborts
ARGV[4] settled_channel  the queue's settled channel: a cancelled id is announced there

Returns {code, state}: code 1 cancelled; 2 abort requested (state active); 0 not
cancellable (state says why: complete, dead, ...); -1 no such job.
]]
-- clock: the Redis clock, read once per call (every script keeps time by it, never the
-- client's, so skew between hosts cannot reorder or lose jobs).
-- Returns now_ms (epoch milliseconds) and now_us (epoch microseconds).
local function redis_clock()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end
-- ready: the ready list of a job's priority. The script declares the ten ready lists as
-- KEYS[first .. first + 9] (priorities 0..9); a priority read from a record is clamped
-- to 0..9 (ready_level), so a damaged field still lands in a declared key.
local function ready_level(priority)
  return math.max(0, math.min(9, tonumber(priority or 0) or 0))
end

local function ready_key(first, priority)
  return KEYS[first + ready_level(priority)]
end
-- record: a finished job record is kept `ttl_ms` (its status and result stay readable, and
-- its id stays an idempotency key), then expires; a ttl of 0 deletes it at once.
-- numbers: integers as text, each formatted once a call. Lua writes a number into a
-- string, and Redis 7.0 a number given to redis.call, through printf's floating-point
-- path: a few of those per job were ~8 % of a drain's Redis CPU. (A script's top-level
-- locals live for one call, so the memo starts empty in every call.)
local number_texts = {}

local function text(n)
  local s = number_texts[n]
  if not s then
    s = string.format('%d', n)
    number_texts[n] = s
  end
  return s
end
local function expire_record(key, ttl_ms)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', key, text(ttl_ms))
  else
    redis.call('DEL', key)
  end
end

-- The error field of a record, for an outcome decided inside Redis (no traceback).
local function error_json(error_type, message)
  return cjson.encode({type = error_type, message = message, traceback = ''})
end

-- A record's state, or 'foreign' if the key holds something that is not a hash (a queue
-- edited by hand): an enqueue skips such an id instead of failing the whole call midway
-- (the jobs before it in the call would keep records without their ready entries).
local function record_state(key)
  local state = redis.pcall('HGET', key, 's')
  if type(state) == 'table' and state.err then return 'foreign' end
  return state
end
-- settled: announce the ids of jobs that just finished (complete, failed, dead, cancelled)
-- on the queue's settled channel, once per call, so a producer waiting in Job.result()
-- hears of it at once instead of polling. One message per call: the ids as netstrings,
-- `<length>:<id>` each (ids may hold any byte). An empty channel name announces nothing.
-- publish: send a pub/sub message on one Redis server (PUBLISH). On a Redis Cluster the
-- loader includes publish_sharded instead.
local function publish(channel, message)
  redis.call('PUBLISH', channel, message)
end
-- (numbers: included above)
local function announce_settled(channel, ids)
  if channel == '' or #ids == 0 then return end
  local parts = {}
  for i = 1, #ids do parts[i] = text(#ids[i]) .. ':' .. ids[i] end
  publish(channel, table.concat(parts))
end
-- links: what a job's final outcome sets off, for jobs linked to others (plain jobs have
-- none of these fields and pay nothing but three more fields in one HMGET).
--   group (field g): the jobs of a group run one at a time, in enqueue order. The group's
--     holder (groups hash: group -> id) is the one job of it that is queued, scheduled or
--     running; the others wait (state 'waiting') in the group's list. When the holder
--     finishes for good, the next waiting job becomes the holder and is made ready.
--   workflow (fields pa, pi): a child counts in each parent named in pa (space-separated
--     ids), once, under its index pi (an HSETNX into the parent's inputs hash, so a re-run
--     child never counts twice); parents on another queue (pq) hear of it by hand-off. A parent (state 'waiting', pd children pending, pk its
--     policy: 'f' a failed child fails it, 'i' it runs anyway; pv 1: keep the children's
--     results as its inputs) is released once it is sealed (no pu) and nothing is pending:
--     made ready to run with its inputs, or, a barrier (a batch: no payload), completed at
--     once with its counts as its result, which counts in its own parents in turn.
-- All O(1) per finished job: a group's list is popped from the head (cancelled entries
-- are skipped as they come), a parent's count is one HINCRBY.
--
-- L, the caller's keys and values (links_context): job_prefix, ready (index in KEYS of the
-- ready list of priority 0), notify, schedule, schedule_wake, now, result_ttl_ms,
-- finished (a list: ids to announce on the settled channel), fair (include/fair.lua's
-- context: a tenant's job made ready goes on its tenant's list), and the five link keys:
-- groups, group_prefix, inputs_prefix, handoff, waiting (the count of waiting jobs);
-- handed_off is set when an outcome went to the handoff ZSET.
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
-- gcra: a rate of one start every `interval` microseconds with bursts of up to `burst`,
-- kept by GCRA on the Redis clock in a key holding the theoretical arrival time (TAT, epoch
-- microseconds): the queue's rate (take.lua) and each tenant's (include/fair.lua). All in
-- whole microseconds: exact in a double (epoch ms with fractions lost a few 1e-4 ms, enough
-- to refuse every start of a "3/s" limit).
-- A start that comes late (a held-back worker's timer, a round trip) keeps its place in the
-- schedule, up to GCRA_LATE_US late in all (the burst's own tolerance counted): the next
-- start is due one interval after the late one's due time, not after its arrival, so a
-- rate is delivered whatever the workers' lateness (GCRA resets TAT to now: with burst 1
-- each late start was lost for good: 2 ms a start cost a 100/s limit 15-19 % of its rate).
-- Later than that (a quiet spell), the schedule starts afresh from now, with the burst. Over
-- any window, starts never run ahead of the rate by more than the burst or GCRA_LATE_US's
-- worth, whichever is more.
local GCRA_LATE_US = 20000

-- How many may start now, the TAT they count from, and how far in the past a TAT is kept
-- (GCRA_LATE_US less the burst's tolerance): the k-th start now is allowed while
-- tat + (k - 1) * interval <= now + tau, tau = (burst - 1) * interval.
local function gcra_allowed(key, now_us, interval, burst)
  local late_us = math.max(0, GCRA_LATE_US - interval * (burst - 1))
  local tat = now_us
  local stored = tonumber(redis.call('GET', key) or 0)
  if stored >= now_us - late_us then tat = stored end
  return math.max(0, math.floor((now_us + interval * burst - tat) / interval)), tat, late_us
end

-- `count` starts spent from `tat`: the new TAT, kept while it can still be credited to a
-- late start, and a second more. The key expires by the server's clock of the call's start
-- and TIME reads the clock as the call runs: were the key to go by the TAT alone, a call
-- that started late would lose it early (a fresh burst, ahead of the rate). A TAT kept
-- longer than it counts is ignored by gcra_allowed. Returns it.
local GCRA_KEPT_MS = 1000

local function gcra_spend(key, now_us, tat, count, interval, late_us)
  tat = tat + count * interval
  local ttl_ms = math.max(1, math.ceil((tat + late_us - now_us) / 1000) + GCRA_KEPT_MS)
  redis.call('SET', key, string.format('%.0f', tat), 'PX', ttl_ms)
  return tat
end

-- When (Redis-clock ms) the next start is allowed: once tat - tau <= now.
local function gcra_next_ms(tat, interval, burst)
  return math.ceil((tat - interval * (burst - 1)) / 1000)
end
-- notify: one wake-up token per job made ready, so that as many blocked workers wake.
local function push_tokens(notify, count)
  if count == 1 then
    redis.call('RPUSH', notify, 1)
  elseif count > 1 then
    local tokens = {}
    for i = 1, count do tokens[i] = 1 end
    redis.call('RPUSH', notify, unpack(tokens))
  end
end
-- (ready: included above)

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
-- (record: included above)
-- schedule: put job `id` on the schedule, due at `due` (ms), in FIFO order among the jobs
-- due in the same millisecond: its score is `due` plus a fraction of a millisecond just
-- above the latest entry due in that millisecond (1/1024 apart: exact in a double for
-- epoch ms below 2^42, the year 2109; past 1024 in one millisecond, ties fall back to the
-- order of ids). Due is the score's integer part: a promoter takes every entry below
-- now + 1.
-- Then wake a sleeping promoter if `id` is now the schedule's head. schedule_wake holds at
-- most one token: one is enough to make every waiting promoter re-read the schedule.
local TIE = 1 / 1024

-- Wake the sleeping promoters: something falls due at `due`, before what they wait for.
local function wake_promoters(schedule_wake, due)
  if redis.call('LLEN', schedule_wake) == 0 then redis.call('RPUSH', schedule_wake, due) end
end

local function schedule_at(schedule, schedule_wake, id, due, flag)
  local score = due
  local last = redis.call('ZREVRANGEBYSCORE', schedule, '(' .. (due + 1), due, 'WITHSCORES',
    'LIMIT', 0, 1)
  if last[2] then score = math.min(tonumber(last[2]) + TIE, due + 1 - TIE) end
  if flag then
    redis.call('ZADD', schedule, flag, score, id)
  else
    redis.call('ZADD', schedule, score, id)
  end
  if redis.call('ZRANGE', schedule, 0, 0)[1] == id then wake_promoters(schedule_wake, due) end
end

-- The caller's context, its five link keys read from KEYS[first .. first + 4], in the
-- order QueueKeys.links() gives them.
local function links_context(first, L)
  L.groups, L.group_prefix, L.inputs_prefix = KEYS[first], KEYS[first + 1], KEYS[first + 2]
  L.handoff, L.waiting = KEYS[first + 3], KEYS[first + 4]
  return L
end

-- A job that waited (behind its group, or for its children) goes ahead: ready now, or on
-- the schedule if it was enqueued with a later due time (field du); a tenant's job (field
-- tn) on its tenant's list.
local function make_ready(L, id, key, priority, due)
  redis.call('DECR', L.waiting)
  if due and due > L.now then
    redis.call('HSET', key, 's', 'scheduled')
    schedule_at(L.schedule, L.schedule_wake, id, due)
  else
    redis.call('HSET', key, 's', 'queued', 'qt', L.now)
    push_ready(L.fair, L.ready, id, priority, redis.call('HGET', key, 'tn'))
    redis.call('RPUSH', L.notify, 1)
  end
end

-- The next job waiting in the group takes it (none waiting: the group is free).
local function next_in_group(L, group)
  local waiting = L.group_prefix .. group
  while true do
    local next_id = redis.call('LPOP', waiting)
    if not next_id then
      redis.call('HDEL', L.groups, group)
      return
    end
    local key = L.job_prefix .. next_id
    local record = redis.call('HMGET', key, 's', 'pr', 'du')
    if record[1] == 'waiting' then -- (a cancelled one is skipped)
      redis.call('HSET', L.groups, group, next_id)
      make_ready(L, next_id, key, record[2], tonumber(record[3]))
      return
    end
  end
end

-- The group passes from `id` (if it holds it) to the next job waiting in it.
local function pass_group(L, group, id)
  if redis.call('HGET', L.groups, group) == id then next_in_group(L, group) end
end

-- A group whose holder is gone (its record deleted or evicted) or finished without
-- passing it on goes on to its next waiting job. Returns the group's holder after.
local LIVE = {queued = true, scheduled = true, active = true, waiting = true}
local function repair_group(L, group)
  local holder = redis.call('HGET', L.groups, group)
  if holder and LIVE[redis.call('HGET', L.job_prefix .. holder, 's') or ''] then return holder end
  next_in_group(L, group)
  return redis.call('HGET', L.groups, group)
end

-- A barrier's outcome: its children's counts, as JSON.
local function barrier_summary(key)
  local counts = redis.call('HMGET', key, 'ok', 'ko')
  local good, bad = tonumber(counts[1] or 0), tonumber(counts[2] or 0)
  return string.format('{"total":%d,"succeeded":%d,"failed":%d}', good + bad, good, bad), bad
end

-- A child's outcome for parents on another queue (field pq: their queue) cannot be
-- counted here (another Cluster slot): it waits in this queue's handoff ZSET until a
-- worker delivers it there (deliver.lua, which counts it as report_to_parents does) and
-- removes it. Delivery is idempotent: a parent counts each child index once.
local function hand_off(L, parent_queue, parents, index, ok, data)
  local entry = parent_queue .. '\n' .. parents .. '\n' .. index .. '\n' .. (ok and 'c' or 'f') .. data
  redis.call('ZADD', L.handoff, L.now, entry)
  L.handed_off = true
end

-- A parent finishes without running: failed by a child, or a barrier whose children all
-- settled. Its inputs go; its own parents (`up`: their ids, its index, their queue if
-- another) hear of it, through the caller's work list.
local function close_parent(L, id, key, state, field, data, work, ok, up)
  redis.call('DECR', L.waiting)
  redis.call('HSET', key, 's', state, field, data, 'ft', L.now)
  expire_record(key, L.result_ttl_ms)
  redis.call('DEL', L.inputs_prefix .. id)
  L.finished[#L.finished + 1] = id
  if up[1] then work[#work + 1] = {up[1], up[2], ok, data, up[3]} end
end

-- The child at `index` of each parent in `parents` finished: ok or not, with `data` (its
-- result or error JSON). Barriers completed on the way report to their parents in turn;
-- `parent_queue` set: the parents are on another queue (hand_off).
local function report_to_parents(L, parents, index, ok, data, parent_queue)
  local work = {{parents, index, ok, data, parent_queue}}
  while #work > 0 do
    local item = table.remove(work)
    if item[5] then
      hand_off(L, item[5], item[1], item[2], item[3], item[4])
    else
      for parent in string.gmatch(item[1], '%S+') do
        local key = L.job_prefix .. parent
        -- (not the payload: it is read, if at all, once the parent is released)
        local p = redis.call('HMGET', key, 's', 'pk', 'pu', 'pa', 'pi', 'pr', 'du', 'pv', 'pq')
        local value = item[3] and 'c' or 'f'
        if p[8] == '1' then value = value .. item[4] end
        local inputs = L.inputs_prefix .. parent
        if p[1] == 'waiting' and redis.call('HSETNX', inputs, item[2], value) == 1 then
          local pending = redis.call('HINCRBY', key, 'pd', -1)
          redis.call('HINCRBY', key, item[3] and 'ok' or 'ko', 1)
          if not item[3] and p[2] == 'f' then
            local message = 'child ' .. item[2] .. ' of ' .. parent .. ' failed'
            close_parent(L, parent, key, 'failed', 'e', error_json('ChildFailed', message), work,
              false, {p[4], p[5], p[9]})
          elseif pending <= 0 and not p[3] then
            if redis.call('HEXISTS', key, 'p') == 1 then -- a parent with a task: it runs now
              make_ready(L, parent, key, p[6], tonumber(p[7]))
            else -- a barrier: complete, with its counts
              local summary, bad = barrier_summary(key)
              close_parent(L, parent, key, 'complete', 'r', summary, work, bad == 0,
                {p[4], p[5], p[9]})
            end
          end
        end
      end
    end
  end
end

-- A parent is sealed: all its children are enqueued. Released if none is pending.
local function seal_parent(L, parent)
  local key = L.job_prefix .. parent
  if redis.call('HDEL', key, 'pu') == 0 then return end
  local p = redis.call('HMGET', key, 's', 'pd', 'pr', 'du', 'pa', 'pi', 'pq')
  if p[1] ~= 'waiting' or tonumber(p[2] or 0) > 0 then return end
  if redis.call('HEXISTS', key, 'p') == 1 then
    make_ready(L, parent, key, p[3], tonumber(p[4]))
  else -- a barrier whose children all settled before the seal (or that had none)
    local work = {}
    local summary, bad = barrier_summary(key)
    close_parent(L, parent, key, 'complete', 'r', summary, work, bad == 0, {p[5], p[6], p[7]})
    local up = work[1]
    if up then report_to_parents(L, up[1], up[2], up[3], up[4], up[5]) end
  end
end

-- A job finished for good (`ok`: it completed), with `data` (result or error JSON). `g`,
-- `pa`, `pi`, `pt`, `pq` are its record's fields (read by the caller with the rest). A
-- parent's inputs go with it, unless it is dead (`buried`: it may be requeued, and then
-- runs with them; trim_dead and purge delete them with the record).
local function follow_links(L, id, ok, data, g, pa, pi, pt, pq, buried)
  if g then pass_group(L, g, id) end
  if pt and not buried then redis.call('DEL', L.inputs_prefix .. id) end
  if pa then report_to_parents(L, pa, pi, ok, data, pq) end
end
-- (fair: included above)
local job_prefix, schedule, skipped, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local schedule_wake, LINKS, READY, tenants = KEYS[5], 6, 11, KEYS[21]
local id, result_ttl_ms, abort_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local settled_channel = ARGV[4]
local job = job_prefix .. id

local record = redis.call('HMGET', job, 's', 'g', 'pa', 'pi', 'pt', 'pq', 'pr', 'tn')
local state = record[1]
if not state then return {-1, ''} end
if state == 'active' then
  redis.call('HSET', job, 'ab', 1)
  publish(abort_channel, id)
  return {2, state}
end
if state ~= 'queued' and state ~= 'scheduled' and state ~= 'waiting' then return {0, state} end

local now, now_us = redis_clock()
local finished = {id}
local F = fair_context(tenants, notify, now_us)
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = finished,
  fair = F,
})
local reason = error_json('JobCancelled', 'cancelled before it ran')
redis.call('HSET', job, 's', 'cancelled', 'ft', now, 'e', reason)
if state == 'queued' then -- its ready entry stays until take skips it
  redis.call('HINCRBY', skipped, ready_level(record[7]), 1)
  if record[8] then count_queued(F, record[8], -1) end
else -- no entry left anywhere (a group's list skips it): the record may expire now
  if state == 'scheduled' then redis.call('ZREM', schedule, id) else redis.call('DECR', L.waiting) end
  expire_record(job, result_ttl_ms)
end
local outcome = reason -- a batch's barrier tells its callbacks the counts so far
if record[5] and redis.call('HEXISTS', job, 'p') == 0 then outcome = barrier_summary(job) end
follow_links(L, id, false, outcome, record[2], record[3], record[4], record[5], record[6])
announce_settled(settled_channel, finished)
return {1, 'cancelled'}
