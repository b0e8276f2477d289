--[[ channel_commit: a reader acknowledges every message up to an id; messages that every
reader has acknowledged are deleted.

KEYS[1] log      STREAM one entry per message, stream id "<id>-0"
KEYS[2] cursors  ZSET   reader -> the last id it acknowledged
KEYS[3] seq      STRING the last id given
ARGV[1] reader   who acknowledges ("" for a mailbox's one reader)
ARGV[2] upto     the last id read (a cursor never moves back, nor past the last id given)
ARGV[3] members  "1": the reader must be a member (a group)

Returns the reader's cursor after the call, or -1 if the reader is not a member.
]]
local cursor = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not cursor then
  if ARGV[3] == '1' then return -1 end
  cursor = 0
end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local new = math.min(math.max(tonumber(cursor), tonumber(ARGV[2])), last)
redis.call('ZADD', KEYS[2], new, ARGV[1])
local lowest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
redis.call('XTRIM', KEYS[1], 'MINID', (tonumber(lowest[2]) + 1) .. '-0')
return new
