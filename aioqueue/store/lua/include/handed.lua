-- handed: a job handed to an idle consumer's offer (enqueue.lua pushes it, idle.lua's
-- withdrawal returns it), as "<max_attempts> <id length> <id><payload>": scripts.handed_job
-- reads it back.
local function handed_item(max_attempts, id, payload)
  return max_attempts .. ' ' .. #id .. ' ' .. id .. payload
end
