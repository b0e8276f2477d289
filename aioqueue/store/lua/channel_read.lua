--[[ channel_read: the messages a reader has not acknowledged yet, oldest first (nothing
changes: a reader that fails before acknowledging them reads them again).

KEYS[1] log      ZSET   entry -> id
KEYS[2] cursors  ZSET   reader -> the last id it acknowledged
ARGV[1] reader   who reads ("" for a mailbox's one reader)
ARGV[2] limit    at most this many
ARGV[3] members  "1": the reader must be a member (a group); else a missing cursor is 0

Returns {cursor, entry, id, entry, id, ...}, or -1 if the reader is not a member.
]]
local cursor = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not cursor then
  if ARGV[3] == '1' then return -1 end
  cursor = 0
end
local entries = redis.call(
  'ZRANGEBYSCORE', KEYS[1], '(' .. cursor, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
table.insert(entries, 1, tonumber(cursor))
return entries
