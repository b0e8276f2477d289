-- done: completed jobs that returned nothing, kept compactly for the idempotency window
-- (span_ms): not a record each (a key costs ~190 B of memory however small) but a field
-- of one of 4096 small hashes per generation, `<done_prefix><span_ms>:<generation>:<slot>`
-- (listpack-encoded while they hold at most hash-max-listpack-entries, 512 by default:
-- ~26 B a job; ~88 B past it). A generation lasts
-- span_ms and its hashes expire one span after it ends, so an id is found, in its slot of
-- the current or the previous generation, for between one and two spans.
-- The slot is keys.done_slot() in Python. A generated id (20 characters, a millisecond
-- timestamp first: enqueue.new_job_id) goes by that millisecond (mod 4096), so the jobs
-- enqueued together, which finish together, share a hash and an ack marks them with one
-- HSET and one PEXPIREAT; any other id by a hash of its last six bytes. An id has the
-- generated shape if it starts with "0" and its characters 2-3 read at least
-- GENERATED_SINCE (bits 30-41 of a millisecond since mid-2017: keys.GENERATED_SINCE), so
-- that zero-padded numbers spread like other ids.
local DONE_SLOTS, GENERATED_SINCE = 4096, 1397

local function sextet(c) -- a character's value in generated ids' alphabet (0-9A-Z_a-z~)
  if c >= 97 and c <= 122 then return c - 60 end
  if c >= 65 and c <= 90 then return c - 55 end
  if c >= 48 and c <= 57 then return c - 48 end
  if c == 95 then return 36 end
  return 63
end

local function done_slot(id)
  if #id == 20 and string.byte(id, 1) == 48
    and sextet(string.byte(id, 2)) * 64 + sextet(string.byte(id, 3)) >= GENERATED_SINCE then
    return sextet(string.byte(id, 7)) * 64 + sextet(string.byte(id, 8)) -- the ms's low 12 bits
  end
  local slot = 0
  for i = math.max(1, #id - 5), #id do slot = (slot * 31 + string.byte(id, i)) % DONE_SLOTS end
  return slot
end

local function is_done(done_prefix, id, now, span_ms)
  if span_ms <= 0 then return false end
  local generation, slot = math.floor(now / span_ms), done_slot(id)
  local prefix = done_prefix .. span_ms .. ':'
  return redis.call('HEXISTS', prefix .. generation .. ':' .. slot, id) == 1
    or redis.call('HEXISTS', prefix .. (generation - 1) .. ':' .. slot, id) == 1
end

-- Marks are gathered in `marks` (a table per call: hash -> its new fields) and written by
-- write_done at the end of the call: one HSET and one PEXPIREAT per hash, not per job.
local function mark_done(marks, done_prefix, id, now, span_ms)
  local generation = math.floor(now / span_ms)
  local key = done_prefix .. span_ms .. ':' .. generation .. ':' .. done_slot(id)
  local fields = marks[key]
  if not fields then
    fields = {expires = (generation + 2) * span_ms}
    marks[key] = fields
  end
  fields[#fields + 1] = id
  fields[#fields + 1] = ''
end

local function write_done(marks)
  for key, fields in pairs(marks) do
    redis.call('HSET', key, unpack(fields))
    redis.call('PEXPIREAT', key, fields.expires)
  end
end
