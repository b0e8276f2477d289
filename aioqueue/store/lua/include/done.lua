-- done: completed jobs that returned nothing, kept compactly for the idempotency window
-- (span_ms): not a record each (a key costs ~190 B of memory however small) but a field
-- of one of 4096 small hashes per generation, `<done_prefix><span_ms>:<generation>:<slot>`
-- (listpack-encoded while they hold at most 128 entries: ~45 B a job). A generation lasts
-- span_ms and its hashes expire one span after it ends, so an id is found, in its slot of
-- the current or the previous generation, for between one and two spans. The slot is
-- keys.done_slot() in Python: the last six bytes of the id, hashed.
local DONE_SLOTS = 4096

local function done_slot(id)
  local slot = 0
  for i = math.max(1, #id - 5), #id do slot = (slot * 31 + string.byte(id, i)) % DONE_SLOTS end
  return slot
end

local done_span, done_generation, done_keys_prefix -- mark_done's, once per call

local function is_done(done_prefix, id, now, span_ms)
  if span_ms <= 0 then return false end
  local generation, slot = math.floor(now / span_ms), done_slot(id)
  local prefix = done_prefix .. span_ms .. ':'
  return redis.call('HEXISTS', prefix .. generation .. ':' .. slot, id) == 1
    or redis.call('HEXISTS', prefix .. (generation - 1) .. ':' .. slot, id) == 1
end

local function mark_done(done_prefix, id, now, span_ms)
  if done_span ~= span_ms then
    done_span, done_generation = span_ms, math.floor(now / span_ms)
    done_keys_prefix = done_prefix .. span_ms .. ':' .. done_generation .. ':'
  end
  local key = done_keys_prefix .. done_slot(id)
  redis.call('HSET', key, id, '')
  redis.call('PEXPIREAT', key, (done_generation + 2) * span_ms)
end
