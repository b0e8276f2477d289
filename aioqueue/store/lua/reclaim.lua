--[[ reclaim: return jobs whose lease expired (their worker died or stalled) to the front
of their ready list, or bury them once they have used all their attempts, so that a job
that keeps killing its worker cannot loop forever. The attempt was counted at take time.
A job whose abort was requested ends cancelled instead. A tenant's job goes back to the
front of its tenant's list, and each lease reclaimed counts off its tenant's running jobs
(include/fair.lua: a tenant held by its cap may start again).

KEYS[1]      active      ZSET  job id -> lease deadline (ms)
KEYS[2]      dead        ZSET  job id -> time buried (ms)
KEYS[3]      notify      LIST  wake-up tokens
KEYS[4]      job_prefix        prefix of job records; carries the queue's hash tag
KEYS[5..14]  ready       LIST  ready lists of priorities 0..9
KEYS[15]     history_prefix    prefix of the history hashes (include/history.lua)
KEYS[16]     schedule    ZSET  job id -> due time (ms)
KEYS[17]     schedule_wake LIST at most one token for pollers
KEYS[18..22] links             the keys of include/links.lua, as QueueKeys.links():
             groups      HASH  group -> id of the job that holds it
             group_prefix      prefix of the groups' waiting lists
             inputs_prefix     prefix of the parents' inputs hashes
             handoff     ZSET  outcomes for parents on other queues, to deliver there
             waiting     STRING how many jobs wait (behind a group, or for children)
KEYS[23]     tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1] limit                  max jobs per call
ARGV[2] default_max_attempts   for jobs enqueued without their own maximum (m = 0); a
                               job with m < 0 retries forever and is never buried here
ARGV[3] result_ttl_ms          how long the record of a job whose abort was requested is kept
ARGV[4] history_ms             how long per-minute outcome counts are kept (0: none are)
ARGV[5] settled_channel        the queue's settled channel ('' announces nothing)

Returns {requeued, buried, id_1, payload_1, attempts_1, max_attempts_1, id_2, ...}: buried
counts the cancelled ones too; the jobs listed are those buried dead (their hooks are
the caller's to run). Jobs buried or cancelled here set off their links (include/links.lua).
]]
-- @include clock
-- @include record
-- @include history
-- @include settled
-- @include links
-- @include fair
local active, dead, notify, job_prefix, READY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], 5
local history_prefix, schedule, schedule_wake, LINKS = KEYS[15], KEYS[16], KEYS[17], 18
local tenants = KEYS[23]
local limit, default_max_attempts = tonumber(ARGV[1]), tonumber(ARGV[2])
local result_ttl_ms, history_ms, settled_channel = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local now, now_us = redis_clock()
local finished = {}
local F = fair_context(tenants, notify, now_us)
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = finished,
  fair = F,
})

local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, limit)
local out = {0, 0}
local requeued, buried = 0, 0
for i = 1, #expired do
  local id = expired[i]
  local key = job_prefix .. id
  redis.call('ZREM', active, id)
  local record = redis.call('HMGET', key, 's', 'n', 'm', 'pr', 'ab', 'p', 'g', 'pa', 'pi', 'pt',
    'pq', 'tn')
  if record[1] == 'active' and record[5] then
    local reason = error_json('JobCancelled', 'aborted while running (its worker was lost)')
    redis.call('HDEL', key, 'w')
    redis.call('HSET', key, 's', 'cancelled', 'ft', now, 'e', reason)
    expire_record(key, result_ttl_ms)
    buried = buried + 1
    finished[#finished + 1] = id
    follow_links(L, id, false, reason, record[7], record[8], record[9], record[10],
      record[11])
  elseif record[1] == 'active' then
    local attempts = tonumber(record[2] or 0) or 0
    local max = tonumber(record[3] or 0) or 0
    if max == 0 then max = default_max_attempts end
    redis.call('HDEL', key, 'w')
    if max > 0 and attempts >= max then
      local message = 'lease expired ' .. attempts .. ' time(s): the worker died or stalled'
      local reason = error_json('LeaseExpired', message)
      redis.call('HSET', key, 's', 'dead', 'ft', now, 'e', reason)
      redis.call('ZADD', dead, now, id)
      buried = buried + 1
      finished[#finished + 1] = id
      follow_links(L, id, false, reason, record[7], record[8], record[9], record[10],
      record[11], true)
      local n = #out
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = id, record[6] or '', attempts, max
    else
      redis.call('HSET', key, 's', 'queued', 'qt', now)
      push_ready(F, READY, id, record[4], record[12], true)
      redis.call('RPUSH', notify, 1)
      requeued = requeued + 1
    end
  end
  if record[1] == 'active' and record[12] then fair_release(F, record[12]) end
end
out[1], out[2] = requeued, buried
local cancelled = buried - (#out - 2) / 4
count_history(history_prefix, now, history_ms, {d = buried - cancelled, x = cancelled})
announce_settled(settled_channel, finished)
return out
