--[[ requeue: move dead jobs back to the end of their ready lists (a tenant's job: of its
tenant's list, include/fair.lua) with a fresh attempt count. Poison entries (raw bytes that
never were a job) stay dead: there is nothing to run.

KEYS[1]      dead        ZSET  job id -> time buried (ms)
KEYS[2]      notify      LIST  wake-up tokens
KEYS[3]      job_prefix        prefix of job records; carries the queue's hash tag
KEYS[4..13]  ready       LIST  ready lists of priorities 0..9
KEYS[14]     tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1] limit   max jobs per call, used when no ids are given (oldest first)
ARGV[2..] ids   the dead jobs to requeue; none means the oldest `limit`

Returns {requeued, skipped}.
]]
-- @include clock
-- @include dead
-- @include fair
local dead, notify, job_prefix, READY, tenants = KEYS[1], KEYS[2], KEYS[3], 4, KEYS[14]
local limit, IDS = tonumber(ARGV[1]), 2
local now, now_us = redis_clock()
local F = fair_context(tenants, notify, now_us)

local ids = chosen_dead(dead, limit, IDS)

local requeued, skipped = 0, 0
for i = 1, #ids do
  local id = ids[i]
  local key = job_prefix .. id
  local record = redis.call('HMGET', key, 's', 'pr', 'raw', 'tn')
  if record[1] == 'dead' and not record[3] and redis.call('ZREM', dead, id) == 1 then
    redis.call('HDEL', key, 'w', 'ft', 'st')
    redis.call('HSET', key, 's', 'queued', 'n', 0, 'qt', now)
    push_ready(F, READY, id, record[2], record[4])
    redis.call('RPUSH', notify, 1)
    requeued = requeued + 1
  else
    skipped = skipped + 1
  end
end
return {requeued, skipped}
