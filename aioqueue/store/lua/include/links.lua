-- links: what a job's final outcome sets off, for jobs linked to others (plain jobs have
-- none of these fields and pay nothing but three more fields in one HMGET).
--   group (field g): the jobs of a group run one at a time, in enqueue order. The group's
--     holder (groups hash: group -> id) is the one job of it that is queued, scheduled or
--     running; the others wait (state 'waiting') in the group's list. When the holder
--     finishes for good, the next waiting job becomes the holder and is made ready.
--   workflow (fields pa, pi): a child counts in each parent named in pa (space-separated
--     ids), once, under its index pi (an HSETNX into the parent's inputs hash, so a re-run
--     child never counts twice); parents on another queue (pq) hear of it by hand-off. A parent (state 'waiting', pd children pending, pk its
--     policy: 'f' a failed child fails it, 'i' it runs anyway; pv 1: keep the children's
--     results as its inputs) is released once it is sealed (no pu) and nothing is pending:
--     made ready to run with its inputs, or, a barrier (a batch: no payload), completed at
--     once with its counts as its result, which counts in its own parents in turn.
-- All O(1) per finished job: a group's list is popped from the head (cancelled entries
-- are skipped as they come), a parent's count is one HINCRBY.
--
-- L, the caller's keys and values (links_context): job_prefix, ready (index in KEYS of the
-- ready list of priority 0), notify, schedule, schedule_wake, now, result_ttl_ms,
-- finished (a list: ids to announce on the settled channel), fair (include/fair.lua's
-- context: a tenant's job made ready goes on its tenant's list), and the five link keys:
-- groups, group_prefix, inputs_prefix, handoff, waiting (the count of waiting jobs);
-- handed_off is set when an outcome went to the handoff ZSET.
-- @include fair
-- @include record
-- @include schedule

-- The caller's context, its five link keys read from KEYS[first .. first + 4], in the
-- order QueueKeys.links() gives them.
local function links_context(first, L)
  L.groups, L.group_prefix, L.inputs_prefix = KEYS[first], KEYS[first + 1], KEYS[first + 2]
  L.handoff, L.waiting = KEYS[first + 3], KEYS[first + 4]
  return L
end

-- A job that waited (behind its group, or for its children) goes ahead: ready now, or on
-- the schedule if it was enqueued with a later due time (field du); a tenant's job (field
-- tn) on its tenant's list.
local function make_ready(L, id, key, priority, due)
  redis.call('DECR', L.waiting)
  if due and due > L.now then
    redis.call('HSET', key, 's', 'scheduled')
    schedule_at(L.schedule, L.schedule_wake, id, due)
  else
    redis.call('HSET', key, 's', 'queued', 'qt', L.now)
    push_ready(L.fair, L.ready, id, priority, redis.call('HGET', key, 'tn'))
    redis.call('RPUSH', L.notify, 1)
  end
end

-- The next job waiting in the group takes it (none waiting: the group is free).
local function next_in_group(L, group)
  local waiting = L.group_prefix .. group
  while true do
    local next_id = redis.call('LPOP', waiting)
    if not next_id then
      redis.call('HDEL', L.groups, group)
      return
    end
    local key = L.job_prefix .. next_id
    local record = redis.call('HMGET', key, 's', 'pr', 'du')
    if record[1] == 'waiting' then -- (a cancelled one is skipped)
      redis.call('HSET', L.groups, group, next_id)
      make_ready(L, next_id, key, record[2], tonumber(record[3]))
      return
    end
  end
end

-- The group passes from `id` (if it holds it) to the next job waiting in it.
local function pass_group(L, group, id)
  if redis.call('HGET', L.groups, group) == id then next_in_group(L, group) end
end

-- A group whose holder is gone (its record deleted or evicted) or finished without
-- passing it on goes on to its next waiting job. Returns the group's holder after.
local LIVE = {queued = true, scheduled = true, active = true, waiting = true}
local function repair_group(L, group)
  local holder = redis.call('HGET', L.groups, group)
  if holder and LIVE[redis.call('HGET', L.job_prefix .. holder, 's') or ''] then return holder end
  next_in_group(L, group)
  return redis.call('HGET', L.groups, group)
end

-- A barrier's outcome: its children's counts, as JSON.
local function barrier_summary(key)
  local counts = redis.call('HMGET', key, 'ok', 'ko')
  local good, bad = tonumber(counts[1] or 0), tonumber(counts[2] or 0)
  return string.format('{"total":%d,"succeeded":%d,"failed":%d}', good + bad, good, bad), bad
end

-- A child's outcome for parents on another queue (field pq: their queue) cannot be
-- counted here (another Cluster slot): it waits in this queue's handoff ZSET until a
-- worker delivers it there (deliver.lua, which counts it as report_to_parents does) and
-- removes it. Delivery is idempotent: a parent counts each child index once.
local function hand_off(L, parent_queue, parents, index, ok, data)
  local entry = parent_queue .. '\n' .. parents .. '\n' .. index .. '\n' .. (ok and 'c' or 'f') .. data
  redis.call('ZADD', L.handoff, L.now, entry)
  L.handed_off = true
end

-- A parent finishes without running: failed by a child, or a barrier whose children all
-- settled. Its inputs go; its own parents (`up`: their ids, its index, their queue if
-- another) hear of it, through the caller's work list.
local function close_parent(L, id, key, state, field, data, work, ok, up)
  redis.call('DECR', L.waiting)
  redis.call('HSET', key, 's', state, field, data, 'ft', L.now)
  expire_record(key, L.result_ttl_ms)
  redis.call('DEL', L.inputs_prefix .. id)
  L.finished[#L.finished + 1] = id
  if up[1] then work[#work + 1] = {up[1], up[2], ok, data, up[3]} end
end

-- The child at `index` of each parent in `parents` finished: ok or not, with `data` (its
-- result or error JSON). Barriers completed on the way report to their parents in turn;
-- `parent_queue` set: the parents are on another queue (hand_off).
local function report_to_parents(L, parents, index, ok, data, parent_queue)
  local work = {{parents, index, ok, data, parent_queue}}
  while #work > 0 do
    local item = table.remove(work)
    if item[5] then
      hand_off(L, item[5], item[1], item[2], item[3], item[4])
    else
      for parent in string.gmatch(item[1], '%S+') do
        local key = L.job_prefix .. parent
        -- (not the payload: it is read, if at all, once the parent is released)
        local p = redis.call('HMGET', key, 's', 'pk', 'pu', 'pa', 'pi', 'pr', 'du', 'pv', 'pq')
        local value = item[3] and 'c' or 'f'
        if p[8] == '1' then value = value .. item[4] end
        local inputs = L.inputs_prefix .. parent
        if p[1] == 'waiting' and redis.call('HSETNX', inputs, item[2], value) == 1 then
          local pending = redis.call('HINCRBY', key, 'pd', -1)
          redis.call('HINCRBY', key, item[3] and 'ok' or 'ko', 1)
          if not item[3] and p[2] == 'f' then
            local message = 'child ' .. item[2] .. ' of ' .. parent .. ' failed'
            close_parent(L, parent, key, 'failed', 'e', error_json('ChildFailed', message), work,
              false, {p[4], p[5], p[9]})
          elseif pending <= 0 and not p[3] then
            if redis.call('HEXISTS', key, 'p') == 1 then -- a parent with a task: it runs now
              make_ready(L, parent, key, p[6], tonumber(p[7]))
            else -- a barrier: complete, with its counts
              local summary, bad = barrier_summary(key)
              close_parent(L, parent, key, 'complete', 'r', summary, work, bad == 0,
                {p[4], p[5], p[9]})
            end
          end
        end
      end
    end
  end
end

-- A parent is sealed: all its children are enqueued. Released if none is pending.
local function seal_parent(L, parent)
  local key = L.job_prefix .. parent
  if redis.call('HDEL', key, 'pu') == 0 then return end
  local p = redis.call('HMGET', key, 's', 'pd', 'pr', 'du', 'pa', 'pi', 'pq')
  if p[1] ~= 'waiting' or tonumber(p[2] or 0) > 0 then return end
  if redis.call('HEXISTS', key, 'p') == 1 then
    make_ready(L, parent, key, p[3], tonumber(p[4]))
  else -- a barrier whose children all settled before the seal (or that had none)
    local work = {}
    local summary, bad = barrier_summary(key)
    close_parent(L, parent, key, 'complete', 'r', summary, work, bad == 0, {p[5], p[6], p[7]})
    local up = work[1]
    if up then report_to_parents(L, up[1], up[2], up[3], up[4], up[5]) end
  end
end

-- A job finished for good (`ok`: it completed), with `data` (result or error JSON). `g`,
-- `pa`, `pi`, `pt`, `pq` are its record's fields (read by the caller with the rest). A
-- parent's inputs go with it, unless it is dead (`buried`: it may be requeued, and then
-- runs with them; trim_dead and purge delete them with the record).
local function follow_links(L, id, ok, data, g, pa, pi, pt, pq, buried)
  if g then pass_group(L, g, id) end
  if pt and not buried then redis.call('DEL', L.inputs_prefix .. id) end
  if pa then report_to_parents(L, pa, pi, ok, data, pq) end
end
