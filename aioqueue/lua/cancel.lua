--[[ cancel: stop a job that has not started. A queued job is marked cancelled and its
ready entry is skipped at take time (O(1), no scan of the list); a scheduled job leaves
the schedule (O(log n)).

KEYS[1] job        HASH  the job record
KEYS[2] schedule   ZSET  job id -> due time (ms)
ARGV[1] id
ARGV[2] result_ttl_ms  how long a cancelled scheduled record is kept (0: deleted). A
                       queued one keeps its record until take skips its ready entry.

Returns {code, state}: code 1 cancelled; 0 not cancellable (state says why: active,
complete, ...); -1 no such job.
]]
local job, schedule = KEYS[1], KEYS[2]
local id, result_ttl_ms = ARGV[1], tonumber(ARGV[2])

local state = redis.call('HGET', job, 's')
if not state then return {-1, ''} end
if state ~= 'queued' and state ~= 'scheduled' then return {0, state} end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HSET', job, 's', 'cancelled', 'ft', now,
  'e', cjson.encode({type = 'JobCancelled', message = 'cancelled before it ran', traceback = ''}))
if state == 'scheduled' then -- no entry left anywhere: the record may expire now
  redis.call('ZREM', schedule, id)
  if result_ttl_ms > 0 then
    redis.call('PEXPIRE', job, result_ttl_ms)
  else
    redis.call('DEL', job)
  end
end
return {1, 'cancelled'}
