--[[ channel_post: append messages to a mailbox or a group, in order, with dense ids.

KEYS[1] seq      STRING the channel's counter (the last id given)
KEYS[2] log      STREAM one entry per message, stream id "<id>-0": fields s (sender),
                 t (sent, epoch ms by the Redis clock) and b (the JSON body)
KEYS[3] cursors  ZSET   reader -> the last id it acknowledged
KEYS[4] dropped  STRING how many messages the length bound trimmed
ARGV[1] sender   who sends ("" for none)
ARGV[2] members  "1": the sender must be a reader of the channel (a group's member)
ARGV[3] max      the most messages kept; the oldest beyond it are trimmed (0: no bound)
ARGV[4] posted_channel  pub/sub channel that wakes waiting fetches ("1:*" is sent)
ARGV[5..] bodies the messages (JSON)

A group member who had acknowledged everything before its post has its cursor moved past
its own messages. Returns the id of the first message (the others follow it), or -1 if
the sender is not a member: then nothing is written.
]]
-- @include clock
-- @include publish
local seq, log, cursors, dropped = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local sender, members, max = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local posted_channel, BODIES = ARGV[4], 5
if members and not redis.call('ZSCORE', cursors, sender) then return -1 end
local now_ms = redis_clock()
local count = #ARGV - BODIES + 1
local last = redis.call('INCRBY', seq, count)
local first = last - count + 1
for i = 1, count do
  redis.call('XADD', log, (first + i - 1) .. '-0', 's', sender, 't', now_ms,
    'b', ARGV[BODIES + i - 1])
end
-- A member who had read everything has read what it sends too (its own messages are
-- not unread to it); one behind keeps its cursor, or acking would skip the others'.
if members and tonumber(redis.call('ZSCORE', cursors, sender)) == first - 1 then
  redis.call('ZADD', cursors, last, sender)
  local lowest = redis.call('ZRANGE', cursors, 0, 0, 'WITHSCORES')  -- it may have been
  redis.call('XTRIM', log, 'MINID', (tonumber(lowest[2]) + 1) .. '-0')  -- the last reader
end
if max > 0 then
  local trimmed = redis.call('XTRIM', log, 'MAXLEN', max)
  if trimmed > 0 then redis.call('INCRBY', dropped, trimmed) end
end
publish(posted_channel, '1:*')
return first
