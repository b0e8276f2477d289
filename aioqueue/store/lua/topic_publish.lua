--[[ topic_publish: append messages to a topic's log, in order, within its length bound.

KEYS[1] log      STREAM one entry per message (auto id), field b (the JSON body); its
                 consumer groups are the topic's subscriber groups
KEYS[2] dropped  STRING how many messages the length bound trimmed before every group
                 had processed them
ARGV[1] max      the most messages kept (0: no bound). Past it, what every group has
                 processed goes first, then the oldest (counted in dropped)
ARGV[2..] bodies the messages (JSON)

Returns the ids of the messages, in order.
]]
-- @include stream_ids
local log, dropped = KEYS[1], KEYS[2]
local max, BODIES = tonumber(ARGV[1]), 2
local ids = {}
for i = BODIES, #ARGV do
  ids[#ids + 1] = redis.call('XADD', log, '*', 'b', ARGV[i])
end
if max > 0 and redis.call('XLEN', log) > max then
  trim_processed(log)
  local trimmed = redis.call('XTRIM', log, 'MAXLEN', max)
  if trimmed > 0 then redis.call('INCRBY', dropped, trimmed) end
end
return ids
