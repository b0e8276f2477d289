--[[ channel_post: append messages to a mailbox or a group, in order, with dense ids.

KEYS[1] seq      STRING the channel's counter (the last id given)
KEYS[2] log      ZSET   entry -> id; an entry is "<id>:<sent ms>:<sender>:<body>"
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
if ARGV[2] == '1' and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end
local now_ms = redis_clock()
local count = #ARGV - 4
local last = redis.call('INCRBY', KEYS[1], count)
local first = last - count + 1
-- A member who had read everything has read what it sends too (its own messages are
-- not unread to it); one behind keeps its cursor, or acking would skip the others'.
local moved = false
if ARGV[2] == '1' and tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1])) == first - 1 then
  redis.call('ZADD', KEYS[3], last, ARGV[1])
  moved = true
end
local head = ':' .. now_ms .. ':' .. ARGV[1] .. ':'
local pairs_ = {}  -- one ZADD per 500 messages, not one each
for i = 1, count do
  local id = first + i - 1
  pairs_[#pairs_ + 1] = id
  pairs_[#pairs_ + 1] = id .. head .. ARGV[4 + i]
  if #pairs_ == 1000 or i == count then
    redis.call('ZADD', KEYS[2], unpack(pairs_))
    pairs_ = {}
  end
end
if moved then  -- it may have been the last reader of older messages
  local lowest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', lowest[2])
end
local max = tonumber(ARGV[3])
if max > 0 then
  local over = redis.call('ZCARD', KEYS[2]) - max
  if over > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
    redis.call('INCRBY', KEYS[4], over)
  end
end
redis.call('PUBLISH', ARGV[4], '1:*')
return first
