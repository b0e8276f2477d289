--[[ enqueue: write job records and make them ready (or schedule them), skipping any job
whose id already has a record, in any state (queued, running, finished or dead, until that
record expires), or completed with no result within the idempotency window (a done hash,
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
KEYS[6]      done_prefix          prefix of the done hashes; carries the queue's hash tag
KEYS[7..]    ready          LIST  the ready lists of the priorities this call uses, in the
                                  order ARGV[2] lists them (a lone job declares one, not ten)
ARGV[1]      count          jobs in this call
ARGV[2]      priorities     the priorities of KEYS[7..], comma-separated, e.g. "5" or "9,5"
ARGV[3]      span_ms        the idempotency window of completed jobs with no result
ARGV[4]      resend         1 if this call may have run already (a resend after a dropped
                            connection): then no id is taken to be fresh
ARGV[5..]    seven per job: id, payload (JSON), priority (0..9, written as in ARGV[2]),
             max_attempts (0 = the worker's default, -1 = unlimited), delay_ms (from now on the Redis
             clock; <= 0 for none), due_ms (epoch ms; <= 0 for none; the later of the two
             wins), fresh (1: the id was just generated, 72 random bits after its
             millisecond, so it cannot have a record or a done entry yet, and is not
             looked for); integers in decimal, stored as sent
ARGV[12..13] only with count = 1, optionally: periodic spec name, tick_ms — the job is
             written only if that tick is later than the last one recorded for the spec

Returns {created_1, state_1, created_2, ...}: created is 1 when the job was written, 0 when
a job with its id exists (state is then that job's state; 'complete' for one in a done
hash) or its tick was enqueued already (state 'tick-done').
]]
-- @include clock
-- @include done
-- @include notify
-- @include record
-- @include schedule
local notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local ticks, job_prefix, done_prefix = KEYS[4], KEYS[5], KEYS[6]
local count, span_ms, resend = tonumber(ARGV[1]), tonumber(ARGV[3]), ARGV[4] == '1'

-- Straight-line code, no closures or iterators per job: this runs once per enqueue.
local ready = {}
if #ARGV[2] == 1 then -- one priority: a lone job, and most batches
  ready[ARGV[2]] = KEYS[7]
else
  local position = 7
  for priority in string.gmatch(ARGV[2], '%d+') do
    ready[priority] = KEYS[position]
    position = position + 1
  end
end

if count == 1 and ARGV[12] then -- one job per periodic tick, however many schedulers race
  local last = tonumber(redis.call('HGET', ticks, ARGV[12]) or -1)
  local tick_ms = tonumber(ARGV[13])
  if tick_ms <= last then return {0, 'tick-done'} end
  redis.call('HSET', ticks, ARGV[12], tick_ms)
end

local now = redis_clock()
local out = {}
local tokens = 0
local pushes = {} -- ready list -> the ids to append, in order: one RPUSH per list per call

for i = 1, count do
  local base = i * 7 - 2 -- id, payload, priority, max_attempts, delay_ms, due_ms, fresh
  local id = ARGV[base]
  local job = job_prefix .. id
  local existing = false
  if resend or ARGV[base + 6] ~= '1' then
    existing = record_state(job)
    if not existing and is_done(done_prefix, id, now, span_ms) then existing = 'complete' end
  end
  if existing then
    out[2 * i - 1], out[2 * i] = 0, existing
  else
    local due = 0
    local delay_ms, due_ms = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
    if delay_ms > 0 then due = now + delay_ms end
    if due_ms > due then due = due_ms end
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

for list, ids in pairs(pushes) do redis.call('RPUSH', list, unpack(ids)) end
push_tokens(notify, tokens)
return out
