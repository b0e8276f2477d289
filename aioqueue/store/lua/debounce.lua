--[[ debounce: one pending run per debounce key, started a window after the last call, with
the last call's arguments. The first call schedules a run (a job with a minted id,
"debounce:<key>:<n>"); a call while that run is still scheduled gives it the new payload,
priority and attempts and moves its start to a window from now; a call once it is due
(queued, running or finished) schedules the next run.

KEYS[1] schedule       ZSET  job id -> due time (ms)
KEYS[2] schedule_wake  LIST  at most one token for pollers
KEYS[3] job_prefix           prefix of job records; carries the queue's hash tag
KEYS[4] debounce       HASH  debounce key -> id of its latest run
KEYS[5] seq            STRING counter for minted ids
ARGV[1] key            the debounce key (the caller's id option)
ARGV[2] payload        JSON
ARGV[3] priority       0..9
ARGV[4] max_attempts   as enqueue.lua stores it
ARGV[5] window_ms      the run starts this long after the last call (Redis clock)

Returns {id, state}: state 'scheduled' (a new run) or 'debounced' (the pending run took
this call's arguments and its start moved).
]]
-- @include clock
-- @include schedule
local schedule, schedule_wake, job_prefix, debounce = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local seq = KEYS[5]
local key, payload, priority, max_attempts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local window_ms = tonumber(ARGV[5])
local due = redis_clock() + window_ms
local pending = redis.call('HGET', debounce, key)
if pending and redis.call('HGET', job_prefix .. pending, 's') == 'scheduled' then
  redis.call('HSET', job_prefix .. pending, 'p', payload, 'pr', priority, 'm', max_attempts)
  redis.call('ZREM', schedule, pending) -- (then in FIFO order among its new due time's)
  schedule_at(schedule, schedule_wake, pending, due)
  return {pending, 'debounced'}
end
local id = 'debounce:' .. key .. ':' .. redis.call('INCR', seq)
redis.call('HSET', job_prefix .. id, 'p', payload, 's', 'scheduled', 'm', max_attempts,
  'pr', priority, 'et', due - window_ms)
schedule_at(schedule, schedule_wake, id, due)
redis.call('HSET', debounce, key, id)
return {id, 'scheduled'}
