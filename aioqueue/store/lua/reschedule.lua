--[[ reschedule: move a scheduled job to a new due time (O(log n)).

KEYS[1] job            HASH  the job record
KEYS[2] schedule       ZSET  job id -> due time (ms)
KEYS[3] schedule_wake  LIST  at most one token; wakes a poller when the schedule's head moves earlier
ARGV[1] id
ARGV[2] delay_ms       new due time: this many ms from now on the Redis clock; <= 0 for none
ARGV[3] due_ms         new due time as epoch ms; <= 0 for none (the later of the two wins;
                       neither means now)

Returns {code, state}: 1 rescheduled; 0 not scheduled (state says what it is); -1 no such job.
]]
-- @include clock
-- @include new_job
-- @include schedule
local job, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local id, delay_ms, due_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local state = redis.call('HGET', job, 's')
if not state then return {-1, ''} end
if state ~= 'scheduled' then return {0, state} end

local now = redis_clock()
local due = math.max(now, due_time(now, delay_ms, due_ms)) -- (neither: now)

schedule_at(schedule, schedule_wake, id, due, 'XX')
return {1, state}
