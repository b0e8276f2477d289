--[[ cancel: stop a job. A queued job is marked cancelled and its ready entry is skipped at
take time (O(1), no scan of the list; the skipped hash says how many such entries each
ready list holds, so that counts stay true); a scheduled job leaves the schedule (O(log n)); a
running job is marked for abort (field ab) and its id is published on the queue's abort
channel, so that whichever worker runs it cancels its asyncio task at once (workers that
miss the message see the mark when they renew leases, and reclaim honours it).

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
local function expire_record(key, ttl_ms)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', key, ttl_ms)
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
local function announce_settled(channel, ids)
  if channel == '' or #ids == 0 then return end
  local parts = {}
  for i = 1, #ids do parts[i] = #ids[i] .. ':' .. ids[i] end
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
-- finished (a list: ids to announce on the settled channel), and the five link keys:
-- groups, group_prefix, inputs_prefix, handoff, waiting (the count of waiting jobs);
-- handed_off is set when an outcome went to the handoff ZSET.
-- (ready: included above)
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
  local head = redis.call('ZRANGE', schedule, 0, 0)
  if head[1] == id and redis.call('LLEN', schedule_wake) == 0 then
    redis.call('RPUSH', schedule_wake, due)
  end
end

-- The caller's context, its five link keys read from KEYS[first .. first + 4], in the
-- order QueueKeys.links() gives them.
local function links_context(first, L)
  L.groups, L.group_prefix, L.inputs_prefix = KEYS[first], KEYS[first + 1], KEYS[first + 2]
  L.handoff, L.waiting = KEYS[first + 3], KEYS[first + 4]
  return L
end

-- A job that waited (behind its group, or for its children) goes ahead: ready now, or on
-- the schedule if it was enqueued with a later due time (field du).
local function make_ready(L, id, key, priority, due)
  redis.call('DECR', L.waiting)
  if due and due > L.now then
    redis.call('HSET', key, 's', 'scheduled')
    schedule_at(L.schedule, L.schedule_wake, id, due)
  else
    redis.call('HSET', key, 's', 'queued', 'qt', L.now)
    redis.call('RPUSH', ready_key(L.ready, priority), id)
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
local job_prefix, schedule, skipped, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local schedule_wake, LINKS, READY = KEYS[5], 6, 11
local id, result_ttl_ms, abort_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local settled_channel = ARGV[4]
local job = job_prefix .. id

local record = redis.call('HMGET', job, 's', 'g', 'pa', 'pi', 'pt', 'pq', 'pr')
local state = record[1]
if not state then return {-1, ''} end
if state == 'active' then
  redis.call('HSET', job, 'ab', 1)
  publish(abort_channel, id)
  return {2, state}
end
if state ~= 'queued' and state ~= 'scheduled' and state ~= 'waiting' then return {0, state} end

local now = redis_clock()
local finished = {id}
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = finished,
})
local reason = error_json('JobCancelled', 'cancelled before it ran')
redis.call('HSET', job, 's', 'cancelled', 'ft', now, 'e', reason)
if state == 'queued' then -- its ready entry stays until take skips it
  redis.call('HINCRBY', skipped, ready_level(record[7]), 1)
else -- no entry left anywhere (a group's list skips it): the record may expire now
  if state == 'scheduled' then redis.call('ZREM', schedule, id) else redis.call('DECR', L.waiting) end
  expire_record(job, result_ttl_ms)
end
local outcome = reason -- a batch's barrier tells its callbacks the counts so far
if record[5] and redis.call('HEXISTS', job, 'p') == 0 then outcome = barrier_summary(job) end
follow_links(L, id, false, outcome, record[2], record[3], record[4], record[5], record[6])
announce_settled(settled_channel, finished)
return {1, 'cancelled'}
