-- schedule: put job `id` on the schedule, due at `due` (ms), in FIFO order among the jobs
-- due in the same millisecond: its score is `due` plus a fraction of a millisecond just
-- above the latest entry due in that millisecond (1/1024 apart: exact in a double for
-- epoch ms below 2^42, the year 2109; past 1024 in one millisecond, ties fall back to the
-- order of ids). Due is the score's integer part: a promoter takes every entry below
-- now + 1.
-- Then wake a sleeping promoter if `id` is now the schedule's head. schedule_wake holds at
-- most one token: one is enough to make every waiting promoter re-read the schedule.
local TIE = 1 / 1024

-- Wake the sleeping promoters: something falls due at `due`, before what they wait for.
local function wake_promoters(schedule_wake, due)
  if redis.call('LLEN', schedule_wake) == 0 then redis.call('RPUSH', schedule_wake, due) end
end

local function schedule_at(schedule, schedule_wake, id, due, flag)
  local score = due
  local last = redis.call('ZREVRANGEBYSCORE', schedule, '(' .. (due + 1), due, 'WITHSCORES',
    'LIMIT', 0, 1)
  if last[2] then score = math.min(tonumber(last[2]) + TIE, due + 1 - TIE) end
  if flag then
    redis.call('ZADD', schedule, flag, score, id)
  else
    redis.call('ZADD', schedule, score, id)
  end
  if redis.call('ZRANGE', schedule, 0, 0)[1] == id then wake_promoters(schedule_wake, due) end
end
