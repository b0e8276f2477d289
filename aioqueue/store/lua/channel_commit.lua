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
local log, cursors, seq = KEYS[1], KEYS[2], KEYS[3]
local reader, upto, members = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local cursor = redis.call('ZSCORE', cursors, reader)
if not cursor then
  if members then return -1 end
  cursor = 0
end
local last = tonumber(redis.call('GET', seq) or '0')
local new = math.min(math.max(tonumber(cursor), upto), last)
redis.call('ZADD', cursors, new, reader)
local lowest = redis.call('ZRANGE', cursors, 0, 0, 'WITHSCORES')
redis.call('XTRIM', log, 'MINID', (tonumber(lowest[2]) + 1) .. '-0')
return new
