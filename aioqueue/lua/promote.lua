--[[ promote: move due jobs from the schedule to their ready lists, in due order.
Any number of pollers may call this at once: each due job is promoted exactly once,
because the whole step is atomic. Entries whose record is no longer scheduled (cancelled)
are only removed from the schedule; entries with no job record, or one that is not a
hash (a third party wrote them), are buried with their raw bytes as "poison-<n>".

KEYS[1]      schedule    ZSET  job id -> due time (ms)
KEYS[2]      notify      LIST  one token per promoted job; wakes workers blocked in BLPOP
KEYS[3]      job_prefix        prefix of job records; carries the queue's hash tag
KEYS[4]      dead        ZSET  job id -> time buried (ms)
KEYS[5]      seq         STRING counter for minted ids
KEYS[6..15]  ready       LIST  ready lists of priorities 0..9
ARGV[1] limit     max jobs per call (bounds run time and unpack())

Returns {promoted, next_due_ms, now_us}; next_due_ms is -1 when the schedule is empty.
now_us is the Redis clock in microseconds, so the caller can sleep to the exact due time
(rounding now down to whole ms would make every sleep up to a millisecond too long).
]]
local schedule, notify, job_prefix, dead, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit = tonumber(ARGV[1])

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])

local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, limit)
local promoted = 0
if #due > 0 then
  redis.call('ZREM', schedule, unpack(due))
  for i = 1, #due do
    local key = job_prefix .. due[i]
    local record = redis.pcall('HMGET', key, 's', 'pr')
    if record.err or not record[1] then
      local id = 'poison-' .. redis.call('INCR', seq)
      local reason = record.err and 'job record is not a hash' or 'schedule entry has no job record'
      redis.call('HSET', job_prefix .. id, 's', 'dead', 'raw', due[i], 'n', 0, 'et', now,
        'ft', now, 'e', cjson.encode({type = 'PoisonEntry', message = reason, traceback = ''}))
      redis.call('ZADD', dead, now, id)
    elseif record[1] == 'scheduled' then
      local priority = math.max(0, math.min(9, tonumber(record[2] or 0) or 0))
      redis.call('HSET', key, 's', 'queued')
      redis.call('RPUSH', KEYS[6 + priority], due[i])
      promoted = promoted + 1
    end
  end
  if promoted > 0 then
    local tokens = {}
    for i = 1, promoted do tokens[i] = 1 end
    redis.call('RPUSH', notify, unpack(tokens))
  end
end

local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
return {promoted, tonumber(head[2] or -1), now_us}
