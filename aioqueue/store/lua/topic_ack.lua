--[[ topic_ack: settle a batch of a subscriber group's messages, each fenced by its lease.

A message is leased to the worker (consumer) it was delivered to: its entry in the
group's pending list names that consumer. A settlement from a consumer that no longer
owns the entry (its lease expired and another worker claimed it) changes nothing.

KEYS[1] log      STREAM the topic's log (consumer groups = subscriber groups)
KEYS[2] retry    HASH   "<group> <id>" -> when a retried message's next attempt is due (ms)
KEYS[3] dead     STREAM dead letters: fields g (group), m (message id), n (attempts),
                 e (error JSON), b (the message's body, or its fields when it has none)
ARGV[1] group    the subscriber group
ARGV[2] consumer the worker that settles
ARGV[3] lease_ms how long a delivery is leased (a retry waits in the pending list, due
                 for a claim when its delay is over: at most lease_ms from now; a longer
                 delay is kept in the retry hash and re-parked by topic_reclaim)
ARGV[4] dead_max the most dead letters kept (approximately; 0: no bound)
ARGV[5] processed_channel  pub/sub channel told ("1:*") when messages were processed
ARGV[6] acked    the ids to acknowledge (outcome complete, fail or abort), space-separated:
                 the common case, kept apart from the JSON (cheaper to read)
ARGV[7] batch    JSON array of the others, [id, outcome, error JSON, delay_ms, attempts];
                 outcome is bury (acknowledged and dead-lettered), retry (again after
                 delay_ms), or release (again at once, this attempt not counted)

What every group has now processed is trimmed from the log (include/stream_ids.lua).
Returns one code per message, for the acked ids, then the batch's: 1 settled, 0 lease not
held.
]]
-- @include clock
-- @include topic_dead
-- @include stream_ids
-- @include publish
local log, retry, dead = KEYS[1], KEYS[2], KEYS[3]
local group, consumer, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local dead_max, processed_channel = tonumber(ARGV[4]), ARGV[5]
local acked, batch = ARGV[6], ARGV[7]
local ids = {}
for id in string.gmatch(acked, '%S+') do ids[#ids + 1] = id end
batch = cjson.decode(batch)
for _, s in ipairs(batch) do ids[#ids + 1] = s[1] end

-- Which of these messages are this consumer's: one XPENDING over their id range (filtered
-- by consumer) answers for all of them, unless the range holds more of its entries than
-- the answer's limit: then an id not listed is looked up alone.
local lowest, highest = ids[1], ids[1]
for _, id in ipairs(ids) do
  if stream_id_less(id, lowest) then lowest = id elseif stream_id_less(highest, id) then highest = id end
end
local owned, limit = {}, #ids * 2 + 64
local listed = lowest and redis.call('XPENDING', log, group, lowest, highest, limit, consumer) or {}
for _, entry in ipairs(listed) do owned[entry[1]] = true end
local function holds(id)
  if owned[id] or #listed < limit then return owned[id] == true end
  local entry = redis.call('XPENDING', log, group, id, id, 1)[1]
  return entry ~= nil and entry[2] == consumer
end

local codes, settled = {}, {}
for i = 1, #ids - #batch do
  if holds(ids[i]) then
    settled[#settled + 1] = ids[i]
    codes[i] = 1
  else
    codes[i] = 0
  end
end
for i, s in ipairs(batch) do
  local id, outcome, error, delay_ms, attempts = s[1], s[2], s[3], tonumber(s[4]), s[5]
  local code = #ids - #batch + i
  if not holds(id) then
    codes[code] = 0
  else
    if outcome == 'retry' then
      local wait = math.min(math.max(delay_ms, 0), lease_ms)
      if delay_ms > lease_ms then
        redis.call('HSET', retry, group .. ' ' .. id, redis_clock() + delay_ms)
      end
      redis.call('XCLAIM', log, group, consumer, 0, id, 'IDLE', lease_ms - wait, 'JUSTID')
    elseif outcome == 'release' then
      redis.call('XCLAIM', log, group, consumer, 0, id, 'IDLE', lease_ms,
        'RETRYCOUNT', math.max(tonumber(attempts) - 1, 0), 'JUSTID')
    else
      bury_message(log, dead, dead_max, group, id, attempts, error)
      settled[#settled + 1] = id
    end
    codes[code] = 1
  end
end
if #settled > 0 then
  redis.call('XACK', log, group, unpack(settled))
  trim_processed(log)
  publish(processed_channel, '1:*')
end
return codes
