--[[ reconcile: repair job records whose entry vanished (a server that evicted keys, a
queue edited by hand), so that no job stays queued forever unnoticed: a queued job missing
from its ready list (or its tenant's) goes back on it (with a notify token), a scheduled one missing from the
schedule becomes due now, an active one missing from the active set gets an expired lease
(so that reclaim returns it), a job waiting behind a group whose holder is gone makes the
group go on (include/links.lua). Looking for a queued job costs a scan of its ready list
(LPOS): run this after an eviction, not routinely.

KEYS[1]      schedule    ZSET  job id -> due time (ms)
KEYS[2]      active      ZSET  job id -> lease deadline (ms)
KEYS[3]      notify      LIST  wake-up tokens
KEYS[4]      job_prefix        prefix of job records; carries the queue's hash tag
KEYS[5..14]  ready       LIST  ready lists of priorities 0..9
KEYS[15]     schedule_wake LIST a token wakes a sleeping promoter for a job put back due now
KEYS[16..20] links             the keys of include/links.lua, as QueueKeys.links():
             groups      HASH  group -> id of the job that holds it
             group_prefix      prefix of the groups' waiting lists
             inputs_prefix     prefix of the parents' inputs hashes
             handoff     ZSET  outcomes for parents on other queues
             waiting     STRING how many jobs wait (behind a group, or for children)
KEYS[21]     tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1..]    ids         job records to look at (found by SCAN), at most a few hundred a call

Returns {looked_at, repaired}.
]]
-- @include clock
-- @include ready
-- @include schedule
-- @include links
-- @include fair
local schedule, active, notify, job_prefix, READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], 5
local schedule_wake, LINKS, tenants, IDS = KEYS[15], 16, KEYS[21], 1
local now, now_us = redis_clock()
local repaired = 0
local F = fair_context(tenants, notify, now_us)
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = 0, finished = {}, fair = F,
})

for i = IDS, #ARGV do
  local id = ARGV[i]
  local record = redis.pcall('HMGET', job_prefix .. id, 's', 'pr', 'g', 'tn')
  local state = (not record.err) and record[1]
  if state == 'queued' then
    local ready = ready_key(READY, record[2])
    if record[4] then ready = fair_list(F, ready_level(record[2]), record[4]) end
    if not redis.call('LPOS', ready, id) then
      push_ready(F, READY, id, record[2], record[4])
      redis.call('RPUSH', notify, 1)
      repaired = repaired + 1
    end
  elseif state == 'scheduled' and not redis.call('ZSCORE', schedule, id) then
    schedule_at(schedule, schedule_wake, id, now)
    repaired = repaired + 1
  elseif state == 'active' and not redis.call('ZSCORE', active, id) then
    redis.call('ZADD', active, 0, id)
    repaired = repaired + 1
  elseif state == 'waiting' and record[3] then
    local holder = redis.call('HGET', L.groups, record[3])
    if repair_group(L, record[3]) ~= holder then repaired = repaired + 1 end
  end
end
return {#ARGV, repaired}
