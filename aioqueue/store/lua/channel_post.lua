--[[ channel_post: append messages to a mailbox or a group, in order, with dense ids.

KEYS[1] seq      STRING the channel's counter (the last id given)
KEYS[2] log      STREAM one entry per message, stream id "<id>-0": fields s (sender),
                 t (sent, epoch ms by the Redis clock) and b (the JSON body)
KEYS[3] cursors  ZSET   reader -> the last id it acknowledged
KEYS[4] dropped  STRING how many messages the length bound trimmed
ARGV[1] sender   who sends ("" for none)
ARGV[2] members  "1": the sender must be a reader of the channel (a group's member)
ARGV[3] max      the most messages kept; the oldest beyond it are trimmed (0: no bound)
ARGV[4] posted   pub/sub channel that wakes fetches waiting for messages ("1:*" is sent)
ARGV[5..] bodies the messages (JSON)

A group member who had acknowledged everything before its post has its cursor moved past
its own messages. Returns the id of the first message (the others follow it), or -1 if
the sender is not a member: then nothing is written.
]]
-- @include clock
-- @include publish
if ARGV[2] == '1' and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
local now_ms = redis_clock()
local count = #ARGV - 4
local last = redis.call('INCRBY', KEYS[1], count)
local first = last - count + 1
for i = 1, count do
  redis.call('XADD', KEYS[2], (first + i - 1) .. '-0', 's', ARGV[1], 't', now_ms, 'b', ARGV[4 + i])
end
-- A member who had read everything has read what it sends too (its own messages are
-- not unread to it); one behind keeps its cursor, or acking would skip the others'.
if ARGV[2] == '1' and tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1])) == first - 1 then
  redis.call('ZADD', KEYS[3], last, ARGV[1])
  local lowest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')  -- it may have been
  redis.call('XTRIM', KEYS[2], 'MINID', (tonumber(lowest[2]) + 1) .. '-0')  -- the last reader
end
local max = tonumber(ARGV[3])
if max > 0 then
  local trimmed = redis.call('XTRIM', KEYS[2], 'MAXLEN', max)
  if trimmed > 0 then redis.call('INCRBY', KEYS[4], trimmed) end
end
publish(ARGV[4], '1:*')
return first
