--[[ cancel: stop a job. A queued job is marked cancelled and its ready entry is skipped at
take time (O(1), no scan of the list; the skips counter says how many such entries the
ready lists hold, so that counts stay true); a scheduled job leaves the schedule (O(log n)); a
running job is marked for abort (field ab) and its id is published on the queue's abort
channel, so that whichever worker runs it cancels its asyncio task at once (workers that
miss the message see the mark when they renew leases, and reclaim honours it).

KEYS[1] job        HASH  the job record
KEYS[2] schedule   ZSET  job id -> due time (ms)
KEYS[3] skips      STRING ready entries of cancelled jobs
ARGV[1] id
ARGV[2] result_ttl_ms  how long a cancelled scheduled record is kept (0: deleted). A
                       queued one keeps its record until take skips its ready entry.
ARGV[3] abort_channel  pub/sub channel of the queue's aborts
ARGV[4] settled        the queue's settled channel: a cancelled id is announced there

Returns {code, state}: code 1 cancelled; 2 abort requested (state active); 0 not
cancellable (state says why: complete, dead, ...); -1 no such job.
]]
-- @include clock
-- @include record
-- @include settled
local job, schedule, skips = KEYS[1], KEYS[2], KEYS[3]
local id, result_ttl_ms, abort_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local state = redis.call('HGET', job, 's')
if not state then return {-1, ''} end
if state == 'active' then
  redis.call('HSET', job, 'ab', 1)
  publish(abort_channel, id)
  return {2, state}
end
if state ~= 'queued' and state ~= 'scheduled' then return {0, state} end

local now = redis_clock()
redis.call('HSET', job, 's', 'cancelled', 'ft', now,
  'e', error_json('JobCancelled', 'cancelled before it ran'))
if state == 'scheduled' then -- no entry left anywhere: the record may expire now
  redis.call('ZREM', schedule, id)
  expire_record(job, result_ttl_ms)
else -- its ready entry stays until take skips it
  redis.call('INCR', skips)
end
announce_settled(ARGV[4], {id})
return {1, 'cancelled'}
