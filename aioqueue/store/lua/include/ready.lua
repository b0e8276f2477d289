-- ready: the ready list of a job's priority. The script declares the ten ready lists as
-- KEYS[first .. first + 9] (priorities 0..9); a priority read from a record is clamped
-- to 0..9 (ready_level), so a damaged field still lands in a declared key.
local function ready_level(priority)
  return math.max(0, math.min(9, tonumber(priority or 0) or 0))
end

local function ready_key(first, priority)
  return KEYS[first + ready_level(priority)]
end
