-- done: completed jobs that returned nothing, kept compactly for the idempotency window
-- (span_ms): not a record each (a key costs ~190 B of memory however small) but an id's
-- fingerprint in one of 4096 small sets per generation,
-- `<done_prefix><span_ms>:<generation>:<slot>`. A fingerprint is a 63-bit integer, so the
-- sets are intsets (8 B a member) while they hold at most set-max-intset-entries (512 by
-- default): ~8.3 B a job instead of a whole id's ~26 B. The price: a new id may be taken
-- for a done one when its fingerprint matches one of the ~2 x 512 in its slots, 1 in 9e15
-- look-ups at most (look-ups are made for ids given to enqueue, not for generated ones).
-- A generation lasts span_ms and its sets expire one span after it ends, so an id is
-- found, in its slot of the current or the previous generation, for one to two spans.
-- The slot is ids.done_slot() in Python. A generated id (20 characters, a millisecond
-- timestamp first: enqueue.new_job_id) goes by that millisecond (mod 4096), so the jobs
-- enqueued together, which finish together, share a set and an ack marks them with one
-- SADD and one PEXPIREAT; any other id by a hash of its last six bytes. An id has the
-- generated shape if it starts with "0" and its characters 2-3 read at least
-- GENERATED_SINCE (bits 30-41 of a millisecond since mid-2017: ids.GENERATED_SINCE), so
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

-- An id's fingerprint (ids.fingerprint): the first 8 bytes of its SHA-1, big-endian, less
-- the top bit, in decimal (so SADD keeps it as an integer). Lua's numbers are doubles, exact
-- to 2^53 only: hi * 2^32 + lo is put together in base 1e8, with hi split in 16-bit halves.
local function fingerprint(id)
  local hex = redis.sha1hex(id)
  local hi = tonumber(string.sub(hex, 1, 8), 16) % 2147483648
  local lo = tonumber(string.sub(hex, 9, 16), 16)
  local h1 = math.floor(hi / 65536)
  local h0 = hi - h1 * 65536
  -- 2^48 = 2814749 * 1e8 + 76710656 and 2^32 = 42 * 1e8 + 94967296
  local low = h1 * 76710656 + h0 * 94967296 + lo
  local carry = math.floor(low / 1e8)
  local high = h1 * 2814749 + h0 * 42 + carry
  if high == 0 then return string.format('%d', low) end
  return string.format('%d%08d', high, low - carry * 1e8)
end

-- Before fingerprints, done ids were fields of hashes under `done:` (one window's worth
-- may still be there after an upgrade): an id completed then is still found.
local function was_done(done_prefix, id, generation, slot, span_ms)
  local legacy = string.gsub(done_prefix, 'donefp:$', 'done:') .. span_ms .. ':'
  for g = generation - 1, generation do
    local found = redis.pcall('HEXISTS', legacy .. g .. ':' .. slot, id)
    if found == 1 then return true end
  end
  return false
end

local function is_done(done_prefix, id, now, span_ms)
  if span_ms <= 0 then return false end
  local generation, slot = math.floor(now / span_ms), done_slot(id)
  local prefix, print = done_prefix .. span_ms .. ':', fingerprint(id)
  return redis.call('SISMEMBER', prefix .. generation .. ':' .. slot, print) == 1
    or redis.call('SISMEMBER', prefix .. (generation - 1) .. ':' .. slot, print) == 1
    or was_done(done_prefix, id, generation, slot, span_ms)
end

-- Marks are gathered in `marks` (a table per call: slot -> its set's new members; one
-- now and span_ms a call) and written by write_done at the end of the call: one SADD and
-- one PEXPIREAT per set, not per job.
local function mark_done(marks, done_prefix, id, now, span_ms)
  local slot = done_slot(id)
  local members = marks[slot]
  if not members then
    local generation = math.floor(now / span_ms)
    members = {key = done_prefix .. span_ms .. ':' .. generation .. ':' .. slot,
      expires = (generation + 2) * span_ms}
    marks[slot] = members
  end
  members[#members + 1] = fingerprint(id)
end

local function write_done(marks)
  for _, members in pairs(marks) do
    redis.call('SADD', members.key, unpack(members))
    redis.call('PEXPIREAT', members.key, members.expires)
  end
end
