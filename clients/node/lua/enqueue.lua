--[[ enqueue: write job records and make them ready (or schedule them), skipping any job
whose id already has a record, in any state (queued, running, finished or dead, until that
record expires), or completed with no result within the idempotency window (a done set,
include/done.lua). So an id is an idempotency key: a client's resend after a lost reply, or
a caller's retry with the same id, never runs a job twice. One call carries one job or a
batch (coalesced or bulk enqueues).

Job records are reached as job_prefix .. id: the prefix is a declared key that carries the
queue's hash tag, so every key touched is in the queue's slot.

KEYS[1]      notify         LIST  one token per ready job; wakes workers blocked in BLPOP
KEYS[2]      schedule       ZSET  job id -> due time (ms)
KEYS[3]      schedule_wake  LIST  at most one token; wakes a poller when the schedule's head moves earlier
KEYS[4]      ticks          HASH  periodic spec name -> last tick enqueued (ms)
KEYS[5]      job_prefix           prefix of job records
KEYS[6]      done_prefix          prefix of the done sets; carries the queue's hash tag
KEYS[7]      idle           ZSET  offers of consumers waiting with nothing to do (idle.lua)
KEYS[8]      active         ZSET  job id -> lease deadline (ms)
KEYS[9]      paused         STRING set while the queue is paused
KEYS[10]     limits         HASH  the queue's rate and concurrency limits
KEYS[11]     ready_prefix         prefix of the ready lists (the priority is appended)
KEYS[12]     direct_prefix        prefix of the offers' direct lists (the token is appended)
KEYS[13]     taken_prefix         prefix of the lists of ids leased per lease token
KEYS[14..]   ready          LIST  the ready lists of the priorities this call uses, in the
                                  order ARGV[2] lists them (a lone job declares one, not ten)
ARGV[1]      count          jobs in this call
ARGV[2]      priorities     the priorities of KEYS[14..], comma-separated, e.g. "5" or "9,5"
ARGV[3]      span_ms        the idempotency window of completed jobs with no result
ARGV[4]      resend         1 if this call may have run already (a resend after a dropped
                            connection): then no id is taken to be fresh
ARGV[5..]    jobs           seven per job (integers in decimal, stored as sent):
  .id            its id
  .payload       JSON
  .priority      0..9, written as in ARGV[2]
  .max_attempts  0 = the worker's default, -1 = unlimited
  .delay_ms      from now on the Redis clock; <= 0 for none
  .due_ms        epoch ms; <= 0 for none; the later of the two wins
  .fresh         1: the id was just generated, 72 random bits after its millisecond, so
                 it cannot have a record or a done entry yet, and is not looked for
             A call of one job may add two more: a periodic spec name and tick_ms; the
             job is then written only if that tick is later than the last one recorded
             for the spec.

Offers: while a consumer waits with nothing to do and has offered to be handed a job
(idle.lua), the call's first queued jobs go straight to such consumers, one each, leased
as take.lua would lease them, onto the offer's direct list, which the consumer's BLPOP
pops: no wake-up and take in between. Only while the queue has nothing else ready, is not
paused and has no limits (so no job is overtaken and no limit bypassed), and for a call
whose queued jobs share one priority. With no offer out, this costs one ZCARD per call.

Returns {created_1, state_1, created_2, ...}: created is 1 when the job was written, 0 when
a job with its id exists (state is then that job's state; 'complete' for one in a done
hash) or its tick was enqueued already (state 'tick-done').
]]
-- clock: the Redis clock, read once per call (every script keeps time by it, never the
-- client's, so skew between hosts cannot reorder or lose jobs).
-- Returns now_ms (epoch milliseconds) and now_us (epoch microseconds).
local function redis_clock()
  local time = redis.call('TIME')
  local seconds, micros = tonumber(time[1]), tonumber(time[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end
-- handed: a job handed to an idle consumer's offer (enqueue.lua pushes it, idle.lua's
-- withdrawal returns it), as "<max_attempts> <id length> <id><payload>": scripts.handed_job
-- reads it back.
local function handed_item(max_attempts, id, payload)
  return max_attempts .. ' ' .. #id .. ' ' .. id .. payload
end
-- new_job: what an enqueue decides about a job it is asked to write, before writing it.
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
-- record: a finished job record is kept `ttl_ms` (its status and result stay readable, and
-- its id stays an idempotency key), then expires; a ttl of 0 deletes it at once.
-- numbers: integers as text, each formatted once a call. Lua writes a number into a
-- string, and Redis 7.0 a number given to redis.call, through printf's floating-point
-- path: a few of those per job were ~8 % of a drain's Redis CPU. (A script's top-level
-- locals live for one call, so the memo starts empty in every call.)
local number_texts = {}

local function text(n)
  local s = number_texts[n]
  if not s then
    s = string.format('%d', n)
    number_texts[n] = s
  end
  return s
end
local function expire_record(key, ttl_ms)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', key, text(ttl_ms))
  else
    redis.call('DEL', key)
  end
end

-- The error field of a record, for an outcome decided inside Redis (no traceback).
local function error_json(error_type, message)
  return cjson.encode({type = error_type, message = message, traceback = ''})
end

-- A record's state, or 'foreign' if the key holds something that is not a hash (a queue
-- edited by hand): an enqueue skips such an id instead of failing the whole call midway
-- (the jobs before it in the call would keep records without their ready entries).
local function record_state(key)
  local state = redis.pcall('HGET', key, 's')
  if type(state) == 'table' and state.err then return 'foreign' end
  return state
end

-- The state of the job whose record is `key`: its record's, 'complete' if it completed
-- with no result within the idempotency window (its id in a done set), else nil: new.
local function known_state(key, done_prefix, id, now, span_ms)
  local state = record_state(key)
  if not state and is_done(done_prefix, id, now, span_ms) then state = 'complete' end
  return state
end

-- When a job is due (ms, Redis clock): `delay_ms` from now or at `due_ms` (epoch), the
-- later of the two, either <= 0 for none; 0 for neither (due now).
local function due_time(now, delay_ms, due_ms)
  local due = 0
  if delay_ms > 0 then due = now + delay_ms end
  if due_ms > due then due = due_ms end
  return due
end
-- notify: one wake-up token per job made ready, so that as many blocked workers wake.
local function push_tokens(notify, count)
  if count == 1 then
    redis.call('RPUSH', notify, 1)
  elseif count > 1 then
    local tokens = {}
    for i = 1, count do tokens[i] = 1 end
    redis.call('RPUSH', notify, unpack(tokens))
  end
end
-- schedule: put job `id` on the schedule, due at `due` (ms), in FIFO order among the jobs
-- due in the same millisecond: its score is `due` plus a fraction of a millisecond just
-- above the latest entry due in that millisecond (1/1024 apart: exact in a double for
-- epoch ms below 2^42, the year 2109; past 1024 in one millisecond, ties fall back to the
-- order of ids). Due is the score's integer part: a promoter takes every entry below
-- now + 1.
-- Then wake a sleeping promoter if `id` is now the schedule's head. schedule_wake holds at
-- most one token: one is enough to make every waiting promoter re-read the schedule.
local TIE = 1 / 1024

-- Wake the sleeping promoters: something falls due at `due`, before what they wait for.
local function wake_promoters(schedule_wake, due)
  if redis.call('LLEN', schedule_wake) == 0 then redis.call('RPUSH', schedule_wake, due) end
end

local function schedule_at(schedule, schedule_wake, id, due, flag)
  local score = due
  local last = redis.call('ZREVRANGEBYSCORE', schedule, '(' .. (due + 1), due, 'WITHSCORES',
    'LIMIT', 0, 1)
  if last[2] then score = math.min(tonumber(last[2]) + TIE, due + 1 - TIE) end
  if flag then
    redis.call('ZADD', schedule, flag, score, id)
  else
    redis.call('ZADD', schedule, score, id)
  end
  if redis.call('ZRANGE', schedule, 0, 0)[1] == id then wake_promoters(schedule_wake, due) end
end
local notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3]
local ticks, job_prefix, done_prefix = KEYS[4], KEYS[5], KEYS[6]
local idle, active, paused, limits = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local ready_prefix, direct_prefix, taken_prefix, READY = KEYS[11], KEYS[12], KEYS[13], 14
local count, priorities, span_ms = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local resend, JOBS = ARGV[4] == '1', 5
local spec, tick_ms = ARGV[JOBS + 7], ARGV[JOBS + 8] -- (after a lone job: see the header)

-- Straight-line code, no closures or iterators per job: this runs once per enqueue.
local ready = {}
if #priorities == 1 then -- one priority: a lone job, and most batches
  ready[priorities] = KEYS[READY]
else
  local position = READY
  for priority in string.gmatch(priorities, '%d+') do
    ready[priority] = KEYS[position]
    position = position + 1
  end
end

if count == 1 and spec then -- one job per periodic tick, however many schedulers race
  local last = tonumber(redis.call('HGET', ticks, spec) or -1)
  local tick = tonumber(tick_ms)
  if tick <= last then return {0, 'tick-done'} end
  redis.call('HSET', ticks, spec, tick)
end

local now = redis_clock()
local out = {}
local tokens = 0
local pushes = {} -- ready list -> the ids to append, in order: one RPUSH per list per call

for i = 1, count do
  local base = JOBS + (i - 1) * 7 -- the job's seven fields, as the header lists them
  local id = ARGV[base]
  local job = job_prefix .. id
  local existing = false
  if resend or ARGV[base + 6] ~= '1' then
    existing = known_state(job, done_prefix, id, now, span_ms)
  end
  if existing then
    out[2 * i - 1], out[2 * i] = 0, existing
  else
    local due = due_time(now, tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]))
    -- priority and max_attempts are stored as sent (decimal integers from the client);
    -- attempts (n) only once taken: absent is 0 to every reader
    if due > now then
      redis.call('HSET', job, 'p', ARGV[base + 1], 's', 'scheduled', 'm', ARGV[base + 3],
        'pr', ARGV[base + 2], 'et', now)
      schedule_at(schedule, schedule_wake, id, due)
      out[2 * i - 1], out[2 * i] = 1, 'scheduled'
    else
      redis.call('HSET', job, 'p', ARGV[base + 1], 's', 'queued', 'm', ARGV[base + 3],
        'pr', ARGV[base + 2], 'et', now)
      local list = ready[ARGV[base + 2]]
      local ids = pushes[list]
      if not ids then
        ids = {}
        pushes[list] = ids
      end
      ids[#ids + 1] = id
      tokens = tokens + 1
      out[2 * i - 1], out[2 * i] = 1, 'queued'
    end
  end
end

-- Hands the first of `ids` to waiting consumers (see the header); returns how many.
local function fill_offers(ids)
  local lapsed = redis.call('ZRANGEBYSCORE', idle, '-inf', '(' .. now, 'LIMIT', 0, 100)
  if #lapsed > 0 then redis.call('ZREM', idle, unpack(lapsed)) end
  if redis.call('EXISTS', paused, limits) > 0 then return 0 end
  for priority = 0, 9 do
    if redis.call('LLEN', ready_prefix .. priority) > 0 then return 0 end
  end
  -- the offers that lapse first: those of the consumers that have waited longest
  local offers = redis.call('ZRANGEBYSCORE', idle, now, '+inf', 'LIMIT', 0, #ids)
  if #offers > 0 then redis.call('ZREM', idle, unpack(offers)) end
  local handed = 0
  for i = 1, #offers do
    local lease_ms, token = string.match(offers[i], '^(%d+) (.+)$')
    handed = handed + 1
    local id = ids[handed]
    local job = job_prefix .. id
    redis.call('HSET', job, 's', 'active', 'w', token, 'n', 1, 'st', now)
    redis.call('ZADD', active, now + tonumber(lease_ms), id)
    local record = redis.call('HMGET', job, 'm', 'p')
    local direct, taken = direct_prefix .. token, taken_prefix .. token
    redis.call('RPUSH', direct, handed_item(record[1], id, record[2]))
    redis.call('PEXPIRE', direct, lease_ms)
    redis.call('RPUSH', taken, id) -- what idle.lua's withdrawal finds, should a reply be lost
    redis.call('PEXPIRE', taken, lease_ms)
  end
  return handed
end

local first_list, first_ids = next(pushes)
if first_list and next(pushes, first_list) == nil and redis.call('ZCARD', idle) > 0 then
  local handed = fill_offers(first_ids)
  if handed > 0 then
    pushes[first_list] = {unpack(first_ids, handed + 1)}
    tokens = tokens - handed
  end
end
for list, ids in pairs(pushes) do
  if #ids > 0 then redis.call('RPUSH', list, unpack(ids)) end
end
push_tokens(notify, tokens)
return out
