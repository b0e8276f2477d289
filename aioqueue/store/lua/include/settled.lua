-- settled: announce the ids of jobs that just finished (complete, failed, dead, cancelled)
-- on the queue's settled channel, once per call, so a producer waiting in Job.result()
-- hears of it at once instead of polling. One message per call: the ids as netstrings,
-- `<length>:<id>` each (ids may hold any byte). An empty channel name announces nothing.
-- @include publish
-- @include numbers
local function announce_settled(channel, ids)
  if channel == '' or #ids == 0 then return end
  local parts = {}
  for i = 1, #ids do parts[i] = text(#ids[i]) .. ':' .. ids[i] end
  publish(channel, table.concat(parts))
end
