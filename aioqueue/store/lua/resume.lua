--[[ resume: end a queue's pause, and wake its workers for the jobs that waited.

KEYS[1]     paused  STRING set while the queue is paused
KEYS[2]     notify  LIST   wake-up tokens: one per ready job (at most ARGV[1]) is added,
                           so that the workers blocked on it take them at once
KEYS[3..12] ready   LIST   ready lists of priorities 0..9
KEYS[13]    tenants ZSET   the tenants with queued jobs; tenants:ready counts the entries on
                           the tenants' lists per priority (include/fair.lua)
ARGV[1]     tokens  the most wake-up tokens to add

Returns 1 if the queue was paused, 0 if it was not (nothing changes then).
]]
-- @include fair
local paused, notify, READY, tenants = KEYS[1], KEYS[2], 3, KEYS[13]
local tokens = tonumber(ARGV[1])
if redis.call('DEL', paused) == 0 then return 0 end
local ready = 0
for priority = 0, 9 do ready = ready + redis.call('LLEN', KEYS[READY + priority]) end
for _, entries in ipairs(redis.call('HVALS', fair_context(tenants, notify, 0).ready)) do
  ready = ready + tonumber(entries)
end
for _ = 1, math.min(ready, tokens) do redis.call('RPUSH', notify, 1) end
return 1
