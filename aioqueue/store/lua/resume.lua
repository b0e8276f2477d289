--[[ resume: end a queue's pause, and wake its workers for the jobs that waited.

KEYS[1]     paused  STRING set while the queue is paused
KEYS[2]     notify  LIST   wake-up tokens: one per ready job (at most ARGV[1]) is added,
                           so that the workers blocked on it take them at once
KEYS[3..12] ready   LIST   ready lists of priorities 0..9
ARGV[1]     tokens  the most wake-up tokens to add

Returns 1 if the queue was paused, 0 if it was not (nothing changes then).
]]
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
local ready = 0
for i = 3, 12 do ready = ready + redis.call('LLEN', KEYS[i]) end
local tokens = math.min(ready, tonumber(ARGV[1]))
for _ = 1, tokens do redis.call('RPUSH', KEYS[2], 1) end
return 1
