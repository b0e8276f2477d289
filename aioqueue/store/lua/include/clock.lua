-- clock: the Redis clock, read once per call (every script keeps time by it, never the
-- client's, so skew between hosts cannot reorder or lose jobs).
-- Returns now_ms (epoch milliseconds) and now_us (epoch microseconds).
local function redis_clock()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end
