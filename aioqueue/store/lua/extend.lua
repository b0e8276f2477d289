--[[ extend: renew the leases a worker still holds, in one call for all its running jobs.

KEYS[1] active      ZSET  job id -> lease deadline (ms)
KEYS[2] job_prefix        prefix of job records; carries the queue's hash tag
ARGV[1] lease_ms    new lease length from now
ARGV[2..]   leases    two per job:
  .id       the job's id
  .lease    the lease token it holds

Returns {lost, aborted}: ids whose lease passed to another owner or expired (the worker
should stop caring about them), and ids held whose abort was requested (a fallback for a
missed abort message). Jobs this lease already settled are neither.
]]
-- @include clock
local active, job_prefix = KEYS[1], KEYS[2]
local lease_ms, LEASES = tonumber(ARGV[1]), 2
local now = redis_clock()

local lost, aborted = {}, {}
for i = LEASES, #ARGV, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local record = redis.call('HMGET', job_prefix .. id, 's', 'w', 'ab')
  if record[1] == 'active' and record[2] == lease then
    redis.call('ZADD', active, 'XX', now + lease_ms, id)
    if record[3] then aborted[#aborted + 1] = id end
  elseif record[1] and record[2] ~= lease then
    lost[#lost + 1] = id
  end
  -- otherwise its ack landed (the reply is on its way) or its record is gone: nothing lost
end
return {lost, aborted}
