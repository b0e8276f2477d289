--[[ purge: delete dead jobs and their records. An id in the dead set whose record is no
longer dead (it was enqueued again) only leaves the set; the live record stays.

KEYS[1] dead        ZSET  job id -> time buried (ms)
KEYS[2] job_prefix        prefix of job records; carries the queue's hash tag
KEYS[3] inputs_prefix     prefix of workflow parents' inputs (deleted with their records)
ARGV[1] limit   max jobs per call, used when no ids are given (oldest first)
ARGV[2..] ids   the dead jobs to purge; none means the oldest `limit`

Returns the number purged.
]]
-- @include dead
local dead, job_prefix, inputs_prefix = KEYS[1], KEYS[2], KEYS[3]
local limit, IDS = tonumber(ARGV[1]), 2

local ids = chosen_dead(dead, limit, IDS)

local purged = 0
for i = 1, #ids do
  if redis.call('ZREM', dead, ids[i]) == 1 then
    delete_dead(job_prefix, inputs_prefix, ids[i])
    purged = purged + 1
  end
end
return purged
