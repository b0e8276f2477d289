--[[ topic_reclaim: claim a subscriber group's messages whose lease ran out (their worker
died or stalled, or they wait for a retry that is now due). What it dead-letters is
trimmed if every group has it now (acks trim the rest, in topic_ack.lua).

KEYS[1] log       STREAM the topic's log (consumer groups = subscriber groups)
KEYS[2] retry     HASH   "<group> <id>" -> when a retried message's next attempt is due
KEYS[3] dead      STREAM dead letters (include/topic_dead.lua)
ARGV[1] group     the subscriber group
ARGV[2] consumer  the worker that claims
ARGV[3] lease_ms  a pending message idle this long is claimed
ARGV[4] count     the most messages to claim
ARGV[5] cursor    where the scan of the pending list resumes ("0-0": from the start)
ARGV[6] max_attempts  the group's attempts per message (-1: unlimited): a message whose lease
                  ran out on its last attempt is dead-lettered (LeaseExpired)
ARGV[7] dead_max  the most dead letters kept (approximately; 0: no bound)
ARGV[8] expired_error  the dead letter's error JSON for such a message

Returns {next cursor, dead-lettered, id_1, fields_1, attempts_1, id_2, ...}: fields as
the stream keeps them (b: the body).
]]
-- @include clock
-- @include stream_ids
-- @include topic_dead
local log, retry, dead = KEYS[1], KEYS[2], KEYS[3]
local group, consumer, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local count, cursor, max_attempts = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local dead_max, expired_error = tonumber(ARGV[7]), ARGV[8]
local now = redis_clock()
if redis.call('EXISTS', log) == 0 then return {'0-0', 0} end
local claimed = redis.call('XAUTOCLAIM', log, group, consumer, lease_ms, cursor,
  'COUNT', count)
local out, buried = {claimed[1], 0}, 0
for _, entry in ipairs(claimed[2]) do
  local id, fields = entry[1], entry[2]
  local key = group .. ' ' .. id
  local attempts = redis.call('XPENDING', log, group, id, id, 1)[1][4]
  local due = tonumber(redis.call('HGET', retry, key) or '0')
  if due > now then -- a retry delayed past one lease: park it again, this claim not counted
    redis.call('XCLAIM', log, group, consumer, 0, id,
      'IDLE', lease_ms - math.min(due - now, lease_ms), 'RETRYCOUNT', attempts - 1, 'JUSTID')
  else
    if due > 0 then redis.call('HDEL', retry, key) end
    if max_attempts >= 0 and attempts - 1 >= max_attempts then
      bury_message(log, dead, dead_max, group, id, attempts - 1, expired_error)
      redis.call('XACK', log, group, id)
      buried = buried + 1
    else
      out[#out + 1] = id
      out[#out + 1] = fields
      out[#out + 1] = attempts
    end
  end
end
for _, id in ipairs(claimed[3] or {}) do -- trimmed while pending (the length bound)
  redis.call('HDEL', retry, group .. ' ' .. id)
end
out[2] = buried
if buried > 0 then trim_processed(log) end
return out
