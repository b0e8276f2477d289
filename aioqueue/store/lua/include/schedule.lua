-- schedule: after `id` was scheduled at `due` (ms), wake a sleeping promoter if `id` is
-- now the schedule's head (the earliest due job). schedule_wake holds at most one token:
-- one is enough to make every waiting promoter re-read the schedule.
local function wake_if_head(schedule, schedule_wake, id, due)
  local head = redis.call('ZRANGE', schedule, 0, 0)
  if head[1] == id and redis.call('LLEN', schedule_wake) == 0 then
    redis.call('RPUSH', schedule_wake, due)
  end
end
