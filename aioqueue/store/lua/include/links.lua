-- links: what a job's final outcome sets off, for jobs linked to others (plain jobs have
-- none of these fields and pay nothing but three more fields in one HMGET).
--   group (field g): the jobs of a group run one at a time, in enqueue order. The group's
--     holder (groups hash: group -> id) is the one job of it that is queued, scheduled or
--     running; the others wait (state 'waiting') in the group's list. When the holder
--     finishes for good, the next waiting job becomes the holder and is made ready.
--   workflow (fields pa, pi): a child counts in each parent named in pa (space-separated
--     ids), once, under its index pi (an HSETNX into the parent's inputs hash, so a re-run
--     child never counts twice). A parent (state 'waiting', pd children pending, pk its
--     policy: 'f' a failed child fails it, 'i' it runs anyway; pv 1: keep the children's
--     results as its inputs) is released once it is sealed (no pu) and nothing is pending:
--     made ready to run with its inputs, or, a barrier (a batch: no payload), completed at
--     once with its counts as its result, which counts in its own parents in turn.
-- All O(1) per finished job: a group's list is popped from the head (cancelled entries
-- are skipped as they come), a parent's count is one HINCRBY.
--
-- L, the caller's keys and values: job_prefix, ready (index in KEYS of the ready list of
-- priority 0), notify, schedule, schedule_wake, groups, group_prefix, inputs_prefix, now,
-- result_ttl_ms, finished (a list: ids to announce on the settled channel).
-- @include ready
-- @include record
-- @include schedule

-- A job that waited (behind its group, or for its children) goes ahead: ready now, or on
-- the schedule if it was enqueued with a later due time (field du).
local function make_ready(L, id, key, priority, due)
  if due and due > L.now then
    redis.call('HSET', key, 's', 'scheduled')
    schedule_at(L.schedule, L.schedule_wake, id, due)
  else
    redis.call('HSET', key, 's', 'queued', 'qt', L.now)
    redis.call('RPUSH', ready_key(L.ready, priority), id)
    redis.call('RPUSH', L.notify, 1)
  end
end

-- The group passes from `id` (if it holds it) to the next job waiting in it.
local function pass_group(L, group, id)
  if redis.call('HGET', L.groups, group) ~= id then return end
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

-- A parent finishes without running: failed by a child, or a barrier whose children all
-- settled. Its inputs go; its own parents hear of it (the caller's work list).
local function close_parent(L, id, key, state, field, data, work, ok, parents, index)
  redis.call('HSET', key, 's', state, field, data, 'ft', L.now)
  expire_record(key, L.result_ttl_ms)
  redis.call('DEL', L.inputs_prefix .. id)
  L.finished[#L.finished + 1] = id
  if parents then work[#work + 1] = {parents, index, ok, data} end
end

-- The child at `index` of each parent in `parents` finished: ok or not, with `data` (its
-- result or error JSON). Barriers completed on the way report to their parents in turn.
local function report_to_parents(L, parents, index, ok, data)
  local work = {{parents, index, ok, data}}
  while #work > 0 do
    local item = table.remove(work)
    for parent in string.gmatch(item[1], '%S+') do
      local key = L.job_prefix .. parent
      local p = redis.call('HMGET', key, 's', 'pk', 'pu', 'pa', 'pi', 'p', 'pr', 'du', 'pv')
      local value = item[3] and 'c' or 'f'
      if p[9] == '1' then value = value .. item[4] end
      if p[1] == 'waiting' and redis.call('HSETNX', L.inputs_prefix .. parent, item[2], value) == 1 then
        local pending = redis.call('HINCRBY', key, 'pd', -1)
        redis.call('HINCRBY', key, item[3] and 'ok' or 'ko', 1)
        if not item[3] and p[2] == 'f' then
          local message = 'child ' .. item[2] .. ' of ' .. parent .. ' failed'
          close_parent(L, parent, key, 'failed', 'e', error_json('ChildFailed', message), work,
            false, p[4], p[5])
        elseif pending <= 0 and not p[3] then
          if p[6] then -- a parent with a task: it runs now
            make_ready(L, parent, key, p[7], tonumber(p[8]))
          else -- a barrier: complete, with its counts
            local counts = redis.call('HMGET', key, 'ok', 'ko')
            local good, bad = tonumber(counts[1] or 0), tonumber(counts[2] or 0)
            local summary = string.format('{"total":%d,"succeeded":%d,"failed":%d}',
              good + bad, good, bad)
            close_parent(L, parent, key, 'complete', 'r', summary, work, bad == 0, p[4], p[5])
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
  local p = redis.call('HMGET', key, 's', 'pd', 'p', 'pr', 'du', 'pa', 'pi')
  if p[1] ~= 'waiting' or tonumber(p[2] or 0) > 0 then return end
  if p[3] then
    make_ready(L, parent, key, p[4], tonumber(p[5]))
  else
    local work = {}
    close_parent(L, parent, key, 'complete', 'r', '{"total":0,"succeeded":0,"failed":0}',
      work, true, p[6], p[7])
    if #work > 0 then report_to_parents(L, work[1][1], work[1][2], true, work[1][4]) end
  end
end

-- A job finished for good (`ok`: it completed), with `data` (result or error JSON). `g`,
-- `pa`, `pi`, `pt` are its record's fields (read by the caller with the rest).
local function follow_links(L, id, ok, data, g, pa, pi, pt)
  if g then pass_group(L, g, id) end
  if pt then redis.call('DEL', L.inputs_prefix .. id) end -- a parent that ran: inputs used
  if pa then report_to_parents(L, pa, pi, ok, data) end
end
