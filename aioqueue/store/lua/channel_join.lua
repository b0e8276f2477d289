--[[ channel_join: a member joins a group.

KEYS[1] cursors  ZSET   member -> the last id it acknowledged
KEYS[2] seq      STRING the last id given
KEYS[3] log      STREAM one entry per message, stream id "<id>-0"
ARGV[1] member   who joins
ARGV[2] history  "1": start before the oldest message the group still keeps; "0": only
                 what comes next. (Either way its lag counts only messages it can read.)

Returns 1 if the member joined, 0 if it was a member already (its cursor is kept).
]]
local cursors, seq, log = KEYS[1], KEYS[2], KEYS[3]
local member, history = ARGV[1], ARGV[2] == '1'
if redis.call('ZSCORE', cursors, member) then return 0 end
local start = tonumber(redis.call('GET', seq) or '0')
if history then
  local oldest = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
  if #oldest > 0 then start = tonumber(string.match(oldest[1][1], '^(%d+)')) - 1 end
end
redis.call('ZADD', cursors, start, member)
return 1
