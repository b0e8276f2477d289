--[[ channel_leave: a member leaves a group; what every remaining member has read goes
(all of it when nobody is left).

KEYS[1] cursors  ZSET   member -> the last id it acknowledged
KEYS[2] log      STREAM one entry per message, stream id "<id>-0"
ARGV[1] member   who leaves

Returns 1 if the member left, 0 if it was not a member.
]]
local cursors, log = KEYS[1], KEYS[2]
local member = ARGV[1]
if redis.call('ZREM', cursors, member) == 0 then return 0 end
local lowest = redis.call('ZRANGE', cursors, 0, 0, 'WITHSCORES')
if #lowest == 0 then
  redis.call('DEL', log)
else
  redis.call('XTRIM', log, 'MINID', (tonumber(lowest[2]) + 1) .. '-0')
end
return 1
