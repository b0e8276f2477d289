--[[ cancel: stop a job. A queued job is marked cancelled and its ready entry is skipped at
take time (O(1), no scan of the list; the skipped hash says how many such entries each
priority's lists hold, a tenant's included, so that counts stay true); a scheduled job
leaves the schedule (O(log n)); a running job is marked for abort (field ab) and its id is
published on the queue's abort channel, so that whichever worker runs it cancels its
asyncio task at once (workers that miss the message see the mark when they renew leases,
and reclaim honours it).

A job waiting (behind its group, or for its children) is cancelled at once. Whatever the
job was, its links follow (include/links.lua): its group passes on, its parents count it
as failed (a cancelled batch's callbacks get its counts so far).

KEYS[1]      job_prefix           prefix of job records; carries the queue's hash tag
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      skipped        HASH  priority -> ready entries of cancelled jobs
KEYS[4]      notify         LIST  wake-up tokens
KEYS[5]      schedule_wake  LIST  at most one token for pollers
KEYS[6..10]  links                the keys of include/links.lua, as QueueKeys.links():
             groups         HASH  group -> id of the job that holds it
             group_prefix         prefix of the groups' waiting lists
             inputs_prefix        prefix of the parents' inputs hashes
             handoff        ZSET  outcomes for parents on other queues, to deliver there
             waiting        STRING how many jobs wait (behind a group, or for children)
KEYS[11..20] ready          LIST  ready lists of priorities 0..9
KEYS[21]     tenants        ZSET  the tenants with queued jobs (a cancelled one no longer
                                  counts); the prefix of the fair keys (include/fair.lua)
ARGV[1] id
ARGV[2] result_ttl_ms  how long a cancelled scheduled record is kept (0: deleted). A
                       queued one keeps its record until take skips its ready entry.
ARGV[3] abort_channel  pub/sub channel of the queue's aborts
ARGV[4] settled_channel  the queue's settled channel: a cancelled id is announced there

Returns {code, state}: code 1 cancelled; 2 abort requested (state active); 0 not
cancellable (state says why: complete, dead, ...); -1 no such job.
]]
-- @include clock
-- @include ready
-- @include record
-- @include settled
-- @include links
-- @include fair
local job_prefix, schedule, skipped, notify = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local schedule_wake, LINKS, READY, tenants = KEYS[5], 6, 11, KEYS[21]
local id, result_ttl_ms, abort_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local settled_channel = ARGV[4]
local job = job_prefix .. id

local record = redis.call('HMGET', job, 's', 'g', 'pa', 'pi', 'pt', 'pq', 'pr', 'tn')
local state = record[1]
if not state then return {-1, ''} end
if state == 'active' then
  redis.call('HSET', job, 'ab', 1)
  publish(abort_channel, id)
  return {2, state}
end
if state ~= 'queued' and state ~= 'scheduled' and state ~= 'waiting' then return {0, state} end

local now, now_us = redis_clock()
local finished = {id}
local F = fair_context(tenants, notify, now_us)
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = finished,
  fair = F,
})
local reason = error_json('JobCancelled', 'cancelled before it ran')
redis.call('HSET', job, 's', 'cancelled', 'ft', now, 'e', reason)
if state == 'queued' then -- its ready entry stays until take skips it
  redis.call('HINCRBY', skipped, ready_level(record[7]), 1)
  if record[8] then count_queued(F, record[8], -1) end
else -- no entry left anywhere (a group's list skips it): the record may expire now
  if state == 'scheduled' then redis.call('ZREM', schedule, id) else redis.call('DECR', L.waiting) end
  expire_record(job, result_ttl_ms)
end
local outcome = reason -- a batch's barrier tells its callbacks the counts so far
if record[5] and redis.call('HEXISTS', job, 'p') == 0 then outcome = barrier_summary(job) end
follow_links(L, id, false, outcome, record[2], record[3], record[4], record[5], record[6])
announce_settled(settled_channel, finished)
return {1, 'cancelled'}
