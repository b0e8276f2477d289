--[[ enqueue: write job records and make them ready (or schedule them), skipping any job
whose id already has a record, in any state (queued, running, finished or dead, until that
record expires), or completed with no result within the idempotency window (a done set,
include/done.lua). So an id is an idempotency key: a client's resend after a lost reply, or
a caller's retry with the same id, never runs a job twice. One call carries one job or a
batch (coalesced or bulk enqueues).

Job records are reached as job_prefix .. id: the prefix is a declared key that carries the
queue's hash tag, so every key touched is in the queue's slot.

KEYS[1]      notify         LIST  one token per ready job; wakes workers blocked in BLPOP
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      schedule_wake  LIST  at most one token; wakes a poller when the schedule's head moves earlier
KEYS[4]      ticks          HASH  periodic spec name -> last tick enqueued (ms)
KEYS[5]      job_prefix           prefix of job records
KEYS[6]      done_prefix          prefix of the done sets; carries the queue's hash tag
KEYS[7]      idle           ZSET  offers of consumers waiting with nothing to do (idle.lua)
KEYS[8]      active         ZSET  job id -> lease deadline (ms)
KEYS[9]      paused         STRING set while the queue is paused
KEYS[10]     limits         HASH  the queue's rate and concurrency limits
KEYS[11]     ready_prefix         prefix of the ready lists (the priority is appended)
KEYS[12]     direct_prefix        prefix of the offers' direct lists (the token is appended)
KEYS[13]     taken_prefix         prefix of the lists of ids leased per lease token
KEYS[14..]   ready          LIST  the ready lists of the priorities this call uses, in the
                                  order ARGV[2] lists them (a lone job declares one, not ten)
ARGV[1]      count          jobs in this call
ARGV[2]      priorities     the priorities of KEYS[14..], comma-separated, e.g. "5" or "9,5"
ARGV[3]      span_ms        the idempotency window of completed jobs with no result
ARGV[4]      resend         1 if this call may have run already (a resend after a dropped
                            connection): then no id is taken to be fresh
ARGV[5..]    jobs           seven per job (integers in decimal, stored as sent):
  .id            its id
  .payload       JSON
  .priority      0..9, written as in ARGV[2]
  .max_attempts  0 = the worker's default, -1 = unlimited
  .delay_ms      from now on the Redis clock; <= 0 for none
  .due_ms        epoch ms; <= 0 for none; the later of the two wins
  .fresh         1: the id was just generated, 72 random bits after its millisecond, so
                 it cannot have a record or a done entry yet, and is not looked for
             A call of one job may add two more: a periodic spec name and tick_ms; the
             job is then written only if that tick is later than the last one recorded
             for the spec.

Offers: while a consumer waits with nothing to do and has offered to be handed a job
(idle.lua), the call's first queued jobs go straight to such consumers, one each, leased
as take.lua would lease them, onto the offer's direct list, which the consumer's BLPOP
pops: no wake-up and take in between. Only while the queue has nothing else ready, is not
paused and has no limits (so no job is overtaken and no limit bypassed), and for a call
whose queued jobs share one priority. With no offer out, this costs one ZCARD per call.

Returns {created_1, state_1, created_2, ...}: created is 1 when the job was written, 0 when
a job with its id exists (state is then that job's state; 'complete' for one in a done
hash) or its tick was enqueued already (state 'tick-done').
]]
-- @include clock
-- @include handed
-- @include new_job
-- @include notify
-- @include schedule
local notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local ticks, job_prefix, done_prefix = KEYS[4], KEYS[5], KEYS[6]
local idle, active, paused, limits = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local ready_prefix, direct_prefix, taken_prefix, READY = KEYS[11], KEYS[12], KEYS[13], 14
local count, priorities, span_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local resend, JOBS = ARGV[4] == '1', 5
local spec, tick_ms = ARGV[JOBS + 7], ARGV[JOBS + 8] -- (after a lone job: see the header)

-- Straight-line code, no closures or iterators per job: this runs once per enqueue.
local ready = {}
if #priorities == 1 then -- one priority: a lone job, and most batches
  ready[priorities] = KEYS[READY]
else
  local position = READY
  for priority in string.gmatch(priorities, '%d+') do
    ready[priority] = KEYS[position]
    position = position + 1
  end
end

if count == 1 and spec then -- one job per periodic tick, however many schedulers race
  local last = tonumber(redis.call('HGET', ticks, spec) or -1)
  local tick = tonumber(tick_ms)
  if tick <= last then return {0, 'tick-done'} end
  redis.call('HSET', ticks, spec, tick)
end

local now = redis_clock()
local out = {}
local tokens = 0
local pushes = {} -- ready list -> the ids to append, in order: one RPUSH per list per call

for i = 1, count do
  local base = JOBS + (i - 1) * 7 -- the job's seven fields, as the header lists them
  local id = ARGV[base]
  local job = job_prefix .. id
  local existing = false
  if resend or ARGV[base + 6] ~= '1' then
    existing = known_state(job, done_prefix, id, now, span_ms)
  end
  if existing then
    out[2 * i - 1], out[2 * i] = 0, existing
  else
    local due = due_time(now, tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]))
    -- priority and max_attempts are stored as sent (decimal integers from the client);
    -- attempts (n) only once taken: absent is 0 to every reader
    if due > now then
      redis.call('HSET', job, 'p', ARGV[base + 1], 's', 'scheduled', 'm', ARGV[base + 3],
        'pr', ARGV[base + 2], 'et', now)
      schedule_at(schedule, schedule_wake, id, due)
      out[2 * i - 1], out[2 * i] = 1, 'scheduled'
    else
      redis.call('HSET', job, 'p', ARGV[base + 1], 's', 'queued', 'm', ARGV[base + 3],
        'pr', ARGV[base + 2], 'et', now)
      local list = ready[ARGV[base + 2]]
      local ids = pushes[list]
      if not ids then
        ids = {}
        pushes[list] = ids
      end
      ids[#ids + 1] = id
      tokens = tokens + 1
      out[2 * i - 1], out[2 * i] = 1, 'queued'
    end
  end
end

-- Hands the first of `ids` to waiting consumers (see the header); returns how many.
local function fill_offers(ids)
  local lapsed = redis.call('ZRANGEBYSCORE', idle, '-inf', '(' .. now, 'LIMIT', 0, 100)
  if #lapsed > 0 then redis.call('ZREM', idle, unpack(lapsed)) end
  if redis.call('EXISTS', paused, limits) > 0 then return 0 end
  for priority = 0, 9 do
    if redis.call('LLEN', ready_prefix .. priority) > 0 then return 0 end
  end
  -- the offers that lapse first: those of the consumers that have waited longest
  local offers = redis.call('ZRANGEBYSCORE', idle, now, '+inf', 'LIMIT', 0, #ids)
  if #offers > 0 then redis.call('ZREM', idle, unpack(offers)) end
  local handed = 0
  for i = 1, #offers do
    local lease_ms, token = string.match(offers[i], '^(%d+) (.+)$')
    handed = handed + 1
    local id = ids[handed]
    local job = job_prefix .. id
    redis.call('HSET', job, 's', 'active', 'w', token, 'n', 1, 'st', now)
    redis.call('ZADD', active, now + tonumber(lease_ms), id)
    local record = redis.call('HMGET', job, 'm', 'p')
    local direct, taken = direct_prefix .. token, taken_prefix .. token
    redis.call('RPUSH', direct, handed_item(record[1], id, record[2]))
    redis.call('PEXPIRE', direct, lease_ms)
    redis.call('RPUSH', taken, id) -- what idle.lua's withdrawal finds, should a reply be lost
    redis.call('PEXPIRE', taken, lease_ms)
  end
  return handed
end

local first_list, first_ids = next(pushes)
if first_list and next(pushes, first_list) == nil and redis.call('ZCARD', idle) > 0 then
  local handed = fill_offers(first_ids)
  if handed > 0 then
    pushes[first_list] = {unpack(first_ids, handed + 1)}
    tokens = tokens - handed
  end
end
for list, ids in pairs(pushes) do
  if #ids > 0 then redis.call('RPUSH', list, unpack(ids)) end
end
push_tokens(notify, tokens)
return out
