--[[ channel_join: a member joins a group.

KEYS[1] cursors  ZSET   member -> the last id it acknowledged
KEYS[2] seq      STRING the last id given
KEYS[3] log      STREAM one entry per message, stream id "<id>-0"
ARGV[1] member   who joins
ARGV[2] history  "1": start before the oldest message the group still keeps; "0": only
                 what comes next. (Either way its lag counts only messages it can read.)

Returns 1 if the member joined, 0 if it was a member already (its cursor is kept).
]]
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local start = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[2] == '1' then
  local oldest = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)
  if #oldest > 0 then start = tonumber(string.match(oldest[1][1], '^(%d+)')) - 1 end
end
redis.call('ZADD', KEYS[1], start, ARGV[1])
return 1
