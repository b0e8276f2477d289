-- promote_due: move up to `limit` due jobs from the schedule to their ready lists
-- (KEYS[ready_first + priority]), in due order, with one notify token each, so workers
-- wake for them: to the end of the list, or with `front` to the front (due first: ahead
-- of the jobs already ready at their priority, still in due order among themselves). A
-- tenant's job goes on its tenant's list instead (include/fair.lua, context F). Entries
-- whose record is no longer scheduled (cancelled) are only removed; entries that are not
-- a job are buried. Each due job is promoted exactly once however many callers race,
-- because the whole script is atomic. A promoted job's ready time (qt) is its due time,
-- not the promotion's: how long it waited (and its expiry, .options(expires=...)) counts
-- from when it was due, even while no worker promoted it.
-- Returns the count.
-- @include fair
-- @include notify
-- @include poison
local function promote_due(schedule, notify, dead, seq, job_prefix, ready_first, now, limit,
    front, F)
  local found = redis.call('ZRANGEBYSCORE', schedule, '-inf', '(' .. (now + 1),
    'WITHSCORES', 'LIMIT', 0, limit)
  if #found == 0 then return 0 end
  local due, due_at = {}, {}
  for i = 1, #found, 2 do
    local n = (i + 1) / 2
    due[n], due_at[n] = found[i], math.floor(tonumber(found[i + 1]))
  end
  redis.call('ZREM', schedule, unpack(due))
  local promoted = 0
  local first, last, step = 1, #due, 1
  if front then first, last, step = #due, 1, -1 end -- last due pushed first
  for i = first, last, step do
    local record = redis.pcall('HMGET', job_prefix .. due[i], 's', 'pr', 'tn')
    if record.err then
      bury_foreign(dead, seq, job_prefix, now, due[i], 'job record is not a hash')
    elseif not record[1] then
      bury_foreign(dead, seq, job_prefix, now, due[i], 'schedule entry has no job record')
    elseif record[1] == 'scheduled' then
      redis.call('HSET', job_prefix .. due[i], 's', 'queued', 'qt', due_at[i])
      push_ready(F, ready_first, due[i], record[2], record[3], front)
      promoted = promoted + 1
    end
  end
  push_tokens(notify, promoted)
  return promoted
end
