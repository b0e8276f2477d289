--[[ enqueue: write one job record and make it ready (or schedule it), unless a job
with the same id is still unfinished. Idempotent, so a client retry cannot duplicate.

KEYS[1] job            HASH  the job record
KEYS[2] ready          LIST  ready list of the job's priority
KEYS[3] notify         LIST  one token per ready job; wakes workers blocked in BLPOP
KEYS[4] schedule       ZSET  job id -> due time (ms)
KEYS[5] schedule_wake  LIST  at most one token; wakes a poller when the schedule's head moves earlier
KEYS[6] dead           ZSET  job id -> time buried; a dead job replaced by this one leaves it
KEYS[7] ticks          HASH  periodic spec name -> last tick enqueued (ms)
ARGV[1] id             job id
ARGV[2] payload        JSON bytes
ARGV[3] priority       0..9
ARGV[4] max_attempts   0 = the worker's default
ARGV[5] delay_ms       run after this many ms of the Redis clock; <= 0 for none
ARGV[6] due_ms         run at this epoch time (ms); <= 0 for none
ARGV[7] periodic       optional: the periodic spec this job is a tick of
ARGV[8] tick_ms        optional: that tick; enqueued only if later than the last one recorded

Returns {created, state}: created is 1 when the job was written, 0 when an unfinished job
with this id exists (state is then that job's state) or the tick was enqueued already
(state 'tick-done').
]]
local job, ready, notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dead, ticks = KEYS[6], KEYS[7]
local periodic, tick_ms = ARGV[7], tonumber(ARGV[8])

if periodic then -- one job per tick, however many schedulers race for it
  local last = tonumber(redis.call('HGET', ticks, periodic) or -1)
  if tick_ms <= last then return {0, 'tick-done'} end
  redis.call('HSET', ticks, periodic, tick_ms)
end
local id, payload = ARGV[1], ARGV[2]
local priority, max_attempts = tonumber(ARGV[3]), tonumber(ARGV[4])
local delay_ms, due_ms = tonumber(ARGV[5]), tonumber(ARGV[6])

local existing = redis.call('HGET', job, 's')
if existing == 'queued' or existing == 'scheduled' or existing == 'active' then
  return {0, existing}
end
if existing then
  redis.call('DEL', job) -- a finished job with this id: start afresh, without its TTL
  if existing == 'dead' then redis.call('ZREM', dead, id) end
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
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
  return {1, 'scheduled'}
end

redis.call('HSET', job, 'p', payload, 's', 'queued', 'n', 0, 'm', max_attempts,
  'pr', priority, 'et', now)
redis.call('RPUSH', ready, id)
redis.call('RPUSH', notify, 1)
return {1, 'queued'}
