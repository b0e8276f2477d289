--[[ enqueue_linked: write jobs linked to others: jobs of a group (run one at a time, in
enqueue order) and the jobs of a workflow (parents that wait for their children); and the
jobs of tenants (.options(tenant=...): made ready on their tenant's list, include/fair.lua),
linked or not. What their outcomes set off is include/links.lua's; plain jobs go through
enqueue.lua.

Ids work as in enqueue.lua: a job whose id has a record (or is in a done set) is skipped,
so a resent call writes nothing twice, and a skipped child never counts in its parent. A
workflow is written parents first, so a child's parents exist when it is counted. A
parent is written unsealed (field pu) and so is not released before all its children are
written, however many calls that takes: the call that writes the last of them seals it.

A job of a group takes the group if no job holds it (or its holder's record is gone or
finished: a repair) and is queued or scheduled as usual; else it waits behind the group
(state 'waiting'; a later due time is kept in field du for when its turn comes).

KEYS[1]      notify         LIST  wake-up tokens
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      schedule_wake  LIST  at most one token for pollers
KEYS[4]      job_prefix           prefix of job records; carries the queue's hash tag
KEYS[5]      done_prefix          prefix of the done sets (include/done.lua)
KEYS[6..10]  links                the keys of include/links.lua, as QueueKeys.links():
             groups         HASH  group -> id of the job that holds it
             group_prefix         prefix of the groups' waiting lists
             inputs_prefix        prefix of the parents' inputs hashes
             handoff        ZSET  outcomes for parents on other queues
             waiting        STRING how many jobs wait (every job here is written waiting,
                                  and counted, then made ready if it need not wait)
KEYS[11..20] ready          LIST  ready lists of priorities 0..9
KEYS[21]     tenants        ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1]      count          jobs in this call
ARGV[2]      span_ms        the idempotency window of completed jobs with no result
ARGV[3]      seal           ids of parents to seal after this call's jobs (space-separated)
ARGV[4]      result_ttl_ms  how long a barrier's record is kept once it completes
ARGV[5]      settled_channel  the queue's settled channel: barriers completed by the seal
                            are announced there
ARGV[6..]    jobs           thirteen per job:
  .id               its id
  .payload          JSON; '' for a barrier (a parent with no task)
  .priority         as in enqueue.lua, and the next three too
  .max_attempts
  .delay_ms
  .due_ms
  .group            '' for none
  .parents          its parents' ids, space-separated; '' for none
  .position         its index among its parents' children
  .parent           '' if it is not one; else its policy and whether it keeps its
                    children's results: 'f1', 'f0', 'i1' or 'i0'
  .parent_queue     '' if its parents are on this queue; else their queue, where they
                    are counted: its outcome is handed off there
  .remote_children  how many of a parent's children are on other queues: counted now,
                    as they cannot be when they are written
  .tenant           '' for none; else its tenant (record field tn)

Returns {created_1, state_1, created_2, ...} as enqueue.lua does; a child not written
because a parent of it is sealed already (its workflow was written before) says 'sealed'.
]]
-- @include clock
-- @include links
-- @include new_job
-- @include settled
-- @include fair
local notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, done_prefix, LINKS, READY = KEYS[4], KEYS[5], 6, 11
local tenants = KEYS[21]
local count, span_ms, seal = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local result_ttl_ms, settled_channel, JOBS = tonumber(ARGV[4]), ARGV[5], 6
local now, now_us = redis_clock()
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms, finished = {},
  fair = fair_context(tenants, notify, now_us),
})
local out = {}

-- Whether the job must wait behind its group (it joins the group's list), or now holds it.
local function behind_group(group, id)
  if repair_group(L, group) then
    redis.call('RPUSH', L.group_prefix .. group, id)
    return true
  end
  redis.call('HSET', L.groups, group, id)
  return false
end

-- Children join only parents still being written: a workflow submitted again under its
-- root's id (sealed) gains no children; nor does a parent that counted this child already
-- (it finished, leaving no record, before the workflow was submitted again).
local function joins(parents, index)
  for p in string.gmatch(parents, '%S+') do
    if redis.call('HEXISTS', job_prefix .. p, 'pu') == 0 then return false end
    if redis.call('HEXISTS', L.inputs_prefix .. p, index) == 1 then return false end
  end
  return true
end

for i = 1, count do
  local base = JOBS + (i - 1) * 13 -- the job's thirteen fields, as the header lists them
  local id, payload, priority = ARGV[base], ARGV[base + 1], ARGV[base + 2]
  local delay_ms, due_ms = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
  local group, parents, parent = ARGV[base + 6], ARGV[base + 7], ARGV[base + 9]
  local parent_queue, remote_children = ARGV[base + 10], tonumber(ARGV[base + 11])
  local key = job_prefix .. id
  local existing = known_state(key, done_prefix, id, now, span_ms)
  local index = ARGV[base + 8]
  if not existing and parents ~= '' and parent_queue == '' and not joins(parents, index) then
    existing = 'sealed'
  end
  if existing then
    out[2 * i - 1], out[2 * i] = 0, existing
  else
    local due = due_time(now, delay_ms, due_ms)
    redis.call('HSET', key, 's', 'waiting', 'm', ARGV[base + 3], 'pr', priority, 'et', now)
    if group ~= '' or parents ~= '' or parent ~= '' then
      redis.call('HSET', key, 'k', 1) -- it has links (ack reads them only then)
    end
    if ARGV[base + 12] ~= '' then redis.call('HSET', key, 'tn', ARGV[base + 12]) end
    redis.call('INCR', L.waiting)
    if payload ~= '' then redis.call('HSET', key, 'p', payload) end
    if due > now then redis.call('HSET', key, 'du', due) end
    if parents ~= '' then
      redis.call('HSET', key, 'pa', parents, 'pi', index)
      if parent_queue ~= '' then
        redis.call('HSET', key, 'pq', parent_queue)
      else
        for p in string.gmatch(parents, '%S+') do
          redis.call('HINCRBY', job_prefix .. p, 'pd', 1)
          redis.call('HINCRBY', job_prefix .. p, 'pt', 1)
        end
      end
    end
    local state = 'waiting'
    if parent ~= '' then -- it waits for its children (and is sealed once all are written)
      redis.call('HSET', key, 'pk', string.sub(parent, 1, 1), 'pv', string.sub(parent, 2, 2),
        'pd', remote_children, 'pt', remote_children, 'pu', 1)
    elseif group == '' or not behind_group(group, id) then
      make_ready(L, id, key, priority, due > now and due or nil)
      state = due > now and 'scheduled' or 'queued'
    end
    if group ~= '' then redis.call('HSET', key, 'g', group) end
    out[2 * i - 1], out[2 * i] = 1, state
  end
end

for parent in string.gmatch(seal, '%S+') do seal_parent(L, parent) end
announce_settled(settled_channel, L.finished) -- (barriers with no children complete at once)
return out
