--[[ ack: settle a batch of jobs a worker ran, each atomically with removing its lease.
A job whose lease the caller no longer holds (it expired and was reclaimed) is left
alone and reported with -2. Every take call mints a new lease token, so an ack can never
settle a later lease of the same job. Settling the same lease twice is harmless: a client
retry after a dropped connection finds it settled already and gets 1.

KEYS[1]      active         ZSET  job id -> lease deadline (ms)
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      dead           ZSET  job id -> time buried (ms)
KEYS[4]      notify         LIST  wake-up tokens
KEYS[5]      schedule_wake  LIST  at most one token for pollers
KEYS[6]      job_prefix           prefix of job records; carries the queue's hash tag
KEYS[7]      done_prefix          prefix of the done sets (include/done.lua); likewise
KEYS[8..17]  ready          LIST  ready lists of priorities 0..9
KEYS[18]     history_prefix       prefix of the history hashes (include/history.lua)
KEYS[19..23] links                the keys of include/links.lua, as QueueKeys.links():
             groups         HASH  group -> id of the job that holds it
             group_prefix         prefix of the groups' waiting lists
             inputs_prefix        prefix of the parents' inputs hashes
             handoff        ZSET  outcomes for parents on other queues, to deliver there
             waiting        STRING how many jobs wait (behind a group, or for children)
KEYS[24]     completed      ZSET  job id -> finished (ms): the newest complete jobs whose
                                  record is kept (COMPLETED_LISTED), for the listings
KEYS[25]     tenants        ZSET  the tenants with queued jobs; the prefix of the fair keys
                                  (include/fair.lua): a tenant's job made ready again goes
                                  on its tenant's list, and its lease's end counts off its
                                  tenant's running jobs (which may let the tenant start again)
ARGV[1] result_ttl_ms  how long finished records with a result or an error are kept; 0
                       deletes them
ARGV[2] kept_ms        how long a complete job with no result (None) is remembered: the
                       idempotency window of its id. Its record goes, its id is kept in a
                       done set (include/done.lua); 0 keeps nothing
ARGV[3] keep_payload   1: a complete record keeps its payload; 0: it keeps only its state,
                       attempts, times, result, priority and task name (field t, read
                       from the payload, which is most of a record)
ARGV[4] history_ms     how long per-minute outcome counts are kept (0: none are)
ARGV[5] settled_channel  the queue's settled channel: finished ids are announced there
                       (include/settled.lua); '' announces nothing
ARGV[6] format         'json': ARGV[7] is one JSON array of settlements, each an array
                       (one argument for the whole batch: packing five arguments per job
                       costs the client more than the rest of the ack); 'args': ARGV[7..]
                       are the settlements' fields, five per job (for ids not UTF-8)
ARGV[7..] settlements  the batch, five fields per job:
  .id        the job's id
  .lease     the lease token it was taken under
  .outcome   what became of it, below
  .data      result or error JSON
  .delay_ms  retry: run again after this long (Redis clock)
  outcome  complete  data = result JSON ('null' for None: no result is stored)
           retry     data = error JSON; run again after delay_ms (Redis clock)
           bury      data = error JSON; move to the dead set
           fail      data = error JSON; finished in error, not dead-lettered
           abort     data = error JSON; finished as cancelled
           expire    data = error JSON; finished as expired (it never ran: not counted
                     in the history, which counts attempts)
           release   data unused; back to the front of ready, attempt not counted

A job that finishes for good sets off its links (include/links.lua): the next job of
its group, its parents' counts.

Returns one code per job: 1 settled, 3 settled and its outcome handed off (a parent on
another queue waits for it: the worker delivers it), -2 lease not held.
]]
-- @include clock
-- @include done
-- @include record
-- @include schedule
-- @include history
-- @include settled
-- @include links
-- @include fair
local active, schedule, dead, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local schedule_wake, job_prefix, done_prefix, READY = KEYS[5], KEYS[6], KEYS[7], 8
local history_prefix, LINKS, completed, tenants = KEYS[18], 19, KEYS[24], KEYS[25]
local result_ttl_ms, kept_ms, keep_payload = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local history_ms, settled_channel, format = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local SETTLEMENTS = 7
local now, now_us = redis_clock()
local F = fair_context(tenants, notify, now_us)
local counts, finished = {}, {} -- outcome code -> n; ids of jobs that finished
local unleased = {} -- ids whose leases go, in one ZREM at the end
local marks = {} -- completed ids to remember, by done set (include/done.lua)
local listed = {} -- ZADD arguments: completed jobs whose record is kept, for the listings
-- The completed index lists the newest this many (a dashboard's list, not a history):
-- only jobs that keep a record (a result, or keep_payload) enter it, so a job that
-- returned None costs it nothing.
local COMPLETED_LISTED = 1000
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = finished,
  fair = F,
})

-- The history code of each outcome, and whether the job is finished by it.
local CODE = {complete = 'c', retry = 'r', bury = 'd', fail = 'f', abort = 'x'}
local FINAL = {complete = true, bury = true, fail = true, abort = true, expire = true}

-- The task's name in a payload: orjson writes it first ({"t":"name",...}); a payload
-- another client wrote may put it elsewhere (or not be JSON: then there is none).
local function task_name(payload)
  if not payload then return nil end
  local name = string.match(payload, '^{"t":"([^"\\]*)"')
  if name then return name end
  local ok, body = pcall(cjson.decode, payload)
  if ok and type(body) == 'table' and type(body.t) == 'string' then return body.t end
  return nil
end

local function finish(key, state, field, data)
  redis.call('HSET', key, 's', state, field, data, 'ft', text(now))
  expire_record(key, result_ttl_ms)
end

-- A complete job keeps what its status, result and id's idempotency need, and what names
-- it: with a result, a record without the payload (unless asked to keep it) but with its
-- task's name (field t, a few bytes: the payload is most of a record) and priority, its
-- lease owner (so that a resent ack finds it settled) and not a retry's error; with none,
-- no record, only its id's fingerprint in a done set (a workflow's parent keeps its record: its
-- children's counts stay readable). Failed and dead ones keep everything.
local function complete(id, key, data, parent)
  if data == 'null' and keep_payload ~= '1' and not parent then
    redis.call('DEL', key)
    if kept_ms > 0 then mark_done(marks, done_prefix, id, now, kept_ms) end
    return
  end
  local fields = {'s', 'complete', 'ft', text(now)}
  if keep_payload ~= '1' then
    local task = task_name(redis.call('HGET', key, 'p'))
    if task then fields[#fields + 1], fields[#fields + 2] = 't', task end
    redis.call('HDEL', key, 'p', 'e')
  else
    redis.call('HDEL', key, 'e')
  end
  if data ~= 'null' then fields[#fields + 1], fields[#fields + 2] = 'r', data end
  redis.call('HSET', key, unpack(fields))
  local ttl_ms = data == 'null' and kept_ms or result_ttl_ms
  expire_record(key, ttl_ms)
  if ttl_ms > 0 then listed[#listed + 1], listed[#listed + 2] = now, id end
end

-- Index the completed jobs that keep a record: the newest COMPLETED_LISTED, none older
-- than a record lives (the listings skip an id whose record went before that).
local function list_completed()
  if #listed == 0 then return end
  redis.call('ZADD', completed, unpack(listed))
  redis.call('ZREMRANGEBYSCORE', completed, '-inf', '(' .. (now - result_ttl_ms))
  if redis.call('ZCARD', completed) > COMPLETED_LISTED * 1.1 then -- trim now and then
    redis.call('ZREMRANGEBYRANK', completed, 0, -COMPLETED_LISTED - 1)
  end
end

-- Ready again: at the end of its ready list (or its tenant's), or with `front` at the front.
local function requeue(id, key, tenant, front)
  push_ready(F, READY, id, redis.call('HGET', key, 'pr'), tenant, front)
  redis.call('RPUSH', notify, 1)
end

local function schedule_retry(id, key, data, delay_ms, tenant)
  if delay_ms <= 0 then
    redis.call('HSET', key, 's', 'queued', 'e', data, 'qt', text(now))
    requeue(id, key, tenant, false)
    return
  end
  local due = now + delay_ms
  redis.call('HSET', key, 's', 'scheduled', 'e', data)
  schedule_at(schedule, schedule_wake, id, due)
end

local function settle(id, lease, outcome, data, delay_ms)
  local key = job_prefix .. id
  local record = redis.call('HMGET', key, 's', 'w', 'k', 'tn')
  if not record[1] then -- settled before, and its record went (no result kept, or ttl 0)
    unleased[#unleased + 1] = id
    return 1
  end
  if record[2] ~= lease then return -2 end
  if record[1] ~= 'active' then return 1 end -- settled before: a retried ack
  unleased[#unleased + 1] = id
  -- a linked job (field k: of a group or a workflow) has more to read, plain ones do not
  local links = record[3] and redis.call('HMGET', key, 'g', 'pa', 'pi', 'pt', 'pq')
  if outcome == 'complete' then
    complete(id, key, data, links and links[4])
  elseif outcome == 'retry' then
    schedule_retry(id, key, data, delay_ms, record[4])
  elseif outcome == 'bury' then
    redis.call('HSET', key, 's', 'dead', 'e', data, 'ft', now)
    redis.call('ZADD', dead, now, id)
  elseif outcome == 'fail' then
    finish(key, 'failed', 'e', data)
  elseif outcome == 'abort' then
    finish(key, 'cancelled', 'e', data)
  elseif outcome == 'expire' then
    redis.call('HINCRBY', key, 'n', -1) -- it was taken, never started
    finish(key, 'expired', 'e', data)
  else -- release: interrupted by shutdown, not the job's fault
    redis.call('HINCRBY', key, 'n', -1)
    redis.call('HSET', key, 's', 'queued', 'qt', now)
    requeue(id, key, record[4], true)
  end
  if record[4] then fair_release(F, record[4]) end
  local code = CODE[outcome]
  if code then counts[code] = (counts[code] or 0) + 1 end
  if FINAL[outcome] then
    finished[#finished + 1] = id
    if links then
      L.handed_off = false
      follow_links(L, id, outcome == 'complete', data, links[1], links[2], links[3], links[4],
        links[5], outcome == 'bury')
      if L.handed_off then return 3 end
    end
  end
  return 1
end

local codes = {}
if format == 'json' then
  local batch = cjson.decode(ARGV[SETTLEMENTS])
  for i = 1, #batch do
    local s = batch[i]
    codes[i] = settle(s[1], s[2], s[3], s[4], tonumber(s[5]))
  end
else
  for i = SETTLEMENTS, #ARGV, 5 do
    codes[#codes + 1] = settle(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
      tonumber(ARGV[i + 4]))
  end
end
if #unleased > 0 then redis.call('ZREM', active, unpack(unleased)) end
write_done(marks)
list_completed()
count_history(history_prefix, now, history_ms, counts)
announce_settled(settled_channel, finished)
return codes
