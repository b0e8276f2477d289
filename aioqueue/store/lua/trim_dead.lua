--[[ trim_dead: keep the dead set bounded: delete the oldest dead jobs beyond a count and
any older than an age, with their records, at most `limit` per call.

KEYS[1] dead        ZSET  job id -> time buried (ms)
KEYS[2] job_prefix        prefix of job records; carries the queue's hash tag
KEYS[3] inputs_prefix     prefix of workflow parents' inputs (deleted with their records)
ARGV[1] max_jobs    keep at most this many dead jobs; <= 0 for no cap
ARGV[2] max_age_ms  delete dead jobs buried longer ago than this; <= 0 for no age limit
ARGV[3] limit       max deletions per call (bounds run time)

Returns the number of dead jobs deleted.
]]
-- @include clock
-- @include dead
local dead, job_prefix, inputs_prefix = KEYS[1], KEYS[2], KEYS[3]
local max_jobs, max_age_ms, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis_clock()

local victims = {}
if max_age_ms > 0 then
  victims = redis.call('ZRANGEBYSCORE', dead, '-inf', now - max_age_ms, 'LIMIT', 0, limit)
end
if max_jobs > 0 and #victims < limit then
  local excess = redis.call('ZCARD', dead) - #victims - max_jobs
  if excess > 0 then
    local extra = redis.call('ZRANGE', dead, #victims, #victims + math.min(excess, limit - #victims) - 1)
    for i = 1, #extra do victims[#victims + 1] = extra[i] end
  end
end

for i = 1, #victims do
  redis.call('ZREM', dead, victims[i])
  delete_dead(job_prefix, inputs_prefix, victims[i])
end
return #victims
