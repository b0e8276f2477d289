--[[ enqueue: write job records and make them ready (or schedule them), skipping any job
whose id already has a record, in any state (queued, running, finished or dead, until that
record expires). So an id is an idempotency key: a client's resend after a lost reply, or
a caller's retry with the same id, never runs a job twice. One call carries one job or a
batch (coalesced or bulk enqueues).

Job records are reached as job_prefix .. id: the prefix is a declared key that carries the
queue's hash tag, so every key touched is in the queue's slot.

KEYS[1]      notify         LIST  one token per ready job; wakes workers blocked in BLPOP
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      schedule_wake  LIST  at most one token; wakes a poller when the schedule's head moves earlier
KEYS[4]      ticks          HASH  periodic spec name -> last tick enqueued (ms)
KEYS[5]      job_prefix           prefix of job records
KEYS[6..]    ready          LIST  the ready lists of the priorities this call uses, in the
                                  order ARGV[2] lists them (a lone job declares one, not ten)
ARGV[1]      count          jobs in this call
ARGV[2]      priorities     the priorities of KEYS[6..], comma-separated, e.g. "5" or "9,5"
ARGV[2..]    six per job: id, payload (JSON), priority (0..9), max_attempts (0 = the worker's
             default), delay_ms (from now on the Redis clock; <= 0 for none), due_ms (epoch
             ms; <= 0 for none; the later of the two wins)
(the job fields start at ARGV[3]); then, only with count = 1, optionally: periodic spec
name, tick_ms — the job is written only
if that tick is later than the last one recorded for the spec

Returns {created_1, state_1, created_2, ...}: created is 1 when the job was written, 0 when
a job with its id exists (state is then that job's state) or its tick was enqueued
already (state 'tick-done').
]]
local notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local ticks, job_prefix = KEYS[4], KEYS[5]
local count = tonumber(ARGV[1])

local ready = {}
local position = 6
for priority in string.gmatch(ARGV[2], '%d+') do
  ready[tonumber(priority)] = KEYS[position]
  position = position + 1
end

if count == 1 and ARGV[9] then -- one job per periodic tick, however many schedulers race
  local last = tonumber(redis.call('HGET', ticks, ARGV[9]) or -1)
  local tick_ms = tonumber(ARGV[10])
  if tick_ms <= last then return {0, 'tick-done'} end
  redis.call('HSET', ticks, ARGV[9], tick_ms)
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local out = {}
local tokens = 0

local function write(id, payload, priority, max_attempts, delay_ms, due_ms)
  local job = job_prefix .. id
  local existing = redis.call('HGET', job, 's')
  if existing then return 0, existing end
  local due = 0
  if delay_ms > 0 then due = now + delay_ms end
  if due_ms > due then due = due_ms end
  if due > now then
    redis.call('HSET', job, 'p', payload, 's', 'scheduled', 'n', 0, 'm', max_attempts,
      'pr', priority, 'et', now)
    redis.call('ZADD', schedule, due, id)
    local head = redis.call('ZRANGE', schedule, 0, 0)
    if head[1] == id and redis.call('LLEN', schedule_wake) == 0 then
      redis.call('RPUSH', schedule_wake, due)
    end
    return 1, 'scheduled'
  end
  redis.call('HSET', job, 'p', payload, 's', 'queued', 'n', 0, 'm', max_attempts,
    'pr', priority, 'et', now)
  redis.call('RPUSH', ready[priority], id)
  tokens = tokens + 1
  return 1, 'queued'
end

for i = 0, count - 1 do
  local base = 3 + i * 6
  local created, state = write(ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2]),
    tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]))
  out[#out + 1] = created
  out[#out + 1] = state
end

if tokens > 0 then
  local batch = {}
  for i = 1, tokens do batch[i] = 1 end
  redis.call('RPUSH', notify, unpack(batch))
end
return out
