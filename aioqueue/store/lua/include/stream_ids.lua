-- stream_ids: compare stream ids ("<ms>-<seq>") and trim a topic's log to what some
-- subscriber group still needs.
local function stream_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function stream_id_less(a, b)
  -- Ids whose two parts have the same lengths compare as strings (no leading zeros)
  if #a == #b and string.find(a, '-', 1, true) == string.find(b, '-', 1, true) then
    return a < b
  end
  local a_ms, a_seq = stream_id(a)
  local b_ms, b_seq = stream_id(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

-- Trim every entry that each consumer group has acknowledged: below the lowest of each
-- group's oldest pending entry (or, with none pending, the entry after its last
-- delivered one). A log with no group keeps everything (its length bound still holds).
-- Returns how many entries were trimmed.
local function trim_processed(log)
  if redis.call('EXISTS', log) == 0 then return 0 end
  local groups = redis.call('XINFO', 'GROUPS', log)
  local lowest = nil
  for _, fields in ipairs(groups) do
    local info = {}
    for i = 1, #fields, 2 do info[fields[i]] = fields[i + 1] end
    local needed
    if tonumber(info['pending']) > 0 then
      needed = redis.call('XPENDING', log, info['name'])[2]
    else
      local ms, seq = stream_id(info['last-delivered-id'])
      needed = string.format('%d-%d', ms, seq + 1)
    end
    if lowest == nil or stream_id_less(needed, lowest) then lowest = needed end
  end
  if lowest == nil then return 0 end
  return redis.call('XTRIM', log, 'MINID', lowest)
end
