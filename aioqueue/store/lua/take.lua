--[[ take: promote due jobs, then lease up to `limit` ready jobs to one worker, FIFO within
a priority. Each taken job moves to the active ZSET in this same atomic step, so there is
no instant at which a job exists only in a worker's memory.

In four sections: (1) a resent call gets back what it took; (2) due jobs are promoted
(promote_due, as promote.lua does; a worker's promoter calls take when a delayed job falls
due, so the job is promoted and leased in one round trip); (3) the queue's limits cap how
many may start now, then jobs are leased by the caller's plan; (4) the lease records what
it took, and the notify tokens of the entries popped are trimmed.

Limits (the queue's limits hash, set by queue.set_limits) hold for every worker at once:
field c caps the jobs leased at a time (the active ZSET's size: a dead worker's jobs count
until their leases expire and reclaim takes them back); fields u and b are a rate, one
start every u microseconds with bursts of up to b, kept by GCRA on the Redis clock (the
rate key holds the theoretical arrival time, TAT). All in whole microseconds: exact in a
double (epoch ms with fractions lost a few 1e-4 ms, enough to refuse every start of a
"3/s" limit). A start that comes late (a held-back worker's timer, a round trip) keeps its
place in the schedule, up to LATE_US late in all (the burst's own tolerance counted): the
next start is due one interval after the late one's due time, not after its arrival, so a
rate is delivered whatever the workers' lateness (GCRA resets TAT to now: with burst 1
each late start was lost for good: 2 ms a start cost a 100/s limit 15-19 % of its rate).
Later than that (a quiet queue), the schedule starts afresh from now, with the burst. Over
any window, starts never run ahead of the rate by more than the burst or LATE_US's worth,
whichever is more. Jobs held back stay in ready, in order.

The caller plans the order: it lists priority levels, each with a quota. A first pass takes
up to each level's quota in that order; a second pass fills what is left in the same
order. Strict priority is levels 9..0 with quotas of `limit`; a weighted plan (levels in
a weighted-random order, quotas by weight) keeps low levels from starving.

Entries that are not a queued job are handled here, never dropped silently: a cancelled
job's stale entry is skipped (its record already says cancelled, and from now on expires
like any finished record); an entry with no job record, or whose record is not a hash (in
a ready list or the schedule), is buried in the dead set with its raw bytes kept, under a
minted id "poison-<n>".

KEYS[1]     active    ZSET  job id -> lease deadline (ms)
KEYS[2]     notify    LIST  wake-up tokens; trimmed by the number of entries taken
KEYS[3]     dead      ZSET  job id -> time buried (ms)
KEYS[4]     seq       STRING counter for minted ids
KEYS[5]     job_prefix        prefix of job records; carries the queue's hash tag
KEYS[6..15] ready     LIST  ready lists of priorities 0..9
KEYS[16]    schedule  ZSET  job id -> due time (ms)
KEYS[17]    skipped   HASH  priority -> ready entries of cancelled jobs; less one per skip
KEYS[18]    done_prefix       prefix of the done hashes (include/done.lua); carries the tag
KEYS[19]    paused    STRING set while the queue is paused: nothing is taken (promotion
                            goes on, so due jobs wait in ready for the resume)
KEYS[20]    limits    HASH  c (most leased at once), u (microseconds between starts), b (burst)
KEYS[21]    rate      STRING the rate's TAT (epoch microseconds); expires once it is past
KEYS[22]    taken_prefix     prefix of the taken lists below; carries the queue's hash tag
KEYS[23]    taken     LIST  ids this lease token took (expires with the lease): if the same
                            call comes again (a client resend after a lost reply), it gets
                            the same jobs back instead of stranding them and taking more.
                            Last, so that the keys before it are the same for every call
ARGV[1] lease     lease token, unique per call (worker id + call number)
ARGV[2] lease_ms  lease length
ARGV[3] limit     max jobs to take (bounds run time)
ARGV[4] woken     1 if the caller's BLPOP just consumed a notify token, else 0: the tokens
                  trimmed are one per entry popped, minus the one already consumed
ARGV[5] result_ttl_ms  how long a skipped cancelled record is kept; 0 deletes it
ARGV[6] promote   promote up to this many due jobs first (0: none; bounds run time)
ARGV[7] front     1: promoted jobs go ahead of the jobs already ready (due first), 0: behind
ARGV[8] span_ms   the idempotency window of completed jobs with no result: an entry whose
                  job completed so (no record left) is skipped, not buried
ARGV[9] forget    lease tokens (space-separated) of the caller's earlier takes whose replies
                  it has read: their taken lists are no longer needed and go now
ARGV[10..] plan   two per level (none needed when limit is 0); unless it lists all ten
                  levels, the notify tokens of the levels left out are kept:
  .priority       0..9
  .quota          the most to take from it in the first pass

Returns {now_us, promoted, next_due_ms, held, id_1, payload_1, attempts_1, max_attempts_1,
waited_ms_1, id_2, ...}: now_us is the Redis clock in microseconds (so a promoter can sleep
to the exact due time), next_due_ms the schedule's head after this call (-1 if empty, or
if not promoting); held says whether the limits kept back jobs that are still ready (0: no;
-1: the concurrency cap; else the Redis-clock ms at which the rate allows the next start;
ready jobs count whether or not their notify tokens are left: a woken caller spent one);
waited_ms how long the job was ready before this take (since field qt, else its enqueue
time et; -1 if unknown), by the Redis clock.
]]
-- @include clock
-- @include done
-- @include record
-- @include poison
-- @include promote_due
local active, notify, dead, seq, job_prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local READY, schedule, skipped, done_prefix = 6, KEYS[16], KEYS[17], KEYS[18]
local paused, limits_key, rate_key = KEYS[19], KEYS[20], KEYS[21]
local taken_prefix, taken_key = KEYS[22], KEYS[23]
local lease, lease_ms, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local woken, result_ttl_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local promote, front, span_ms = tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local forget, PLAN = ARGV[9], 10
if limit > 0 and redis.call('EXISTS', paused) == 1 then limit = 0 end
if limit > 0 and #ARGV < PLAN + 1 then
  return redis.error_reply('take: no priority plan given (ARGV[10..])')
end
local now, now_us = redis_clock()
local out = {now_us, 0, -1, 0}

local function waited_ms(ready_at)
  if not ready_at then return -1 end
  return now - tonumber(ready_at)
end
for token in string.gmatch(forget, '%S+') do redis.call('DEL', taken_prefix .. token) end

-- (1) A resent call (same lease token: the client retried after a lost reply) gets the
-- jobs it took the first time that are still its own, and takes nothing more.
local prior = redis.call('LRANGE', taken_key, 0, -1)
if #prior > 0 then
  for i = 1, #prior do
    local record = redis.call('HMGET', job_prefix .. prior[i],
      's', 'w', 'p', 'n', 'm', 'qt', 'et')
    if record[1] == 'active' and record[2] == lease then
      out[#out + 1] = prior[i]
      out[#out + 1] = record[3] or ''
      out[#out + 1] = tonumber(record[4] or 0)
      out[#out + 1] = tonumber(record[5] or 0)
      out[#out + 1] = waited_ms(record[6] or record[7])
    end
  end
  return out
end

-- (2) Promote due jobs first, so the take below can lease them.
if promote > 0 then
  out[2] = promote_due(schedule, notify, dead, seq, job_prefix, READY, now, promote, front)
  local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  out[3] = tonumber(head[2] or -1)
end

-- (3) The queue's limits: how many may start now. (TAT: theoretical arrival time.)
local LATE_US = 20000 -- how late a start may come and keep its place in the rate's schedule
local limits = limit > 0 and redis.call('HMGET', limits_key, 'c', 'u', 'b') or {}
local capped_by, interval, burst, tat = 0, tonumber(limits[2]), tonumber(limits[3] or 1), now_us
local late_us = 0 -- how far in the past a TAT is kept (LATE_US less the burst's tolerance)
if limits[1] then
  local room = math.max(0, tonumber(limits[1]) - redis.call('ZCARD', active))
  if room < limit then limit, capped_by = room, -1 end
end
if interval then -- GCRA: the k-th start now is allowed while tat + (k - 1) * u <= now + tau,
  -- tau = (burst - 1) * u; a TAT at most late_us past keeps its place (see the header)
  late_us = math.max(0, LATE_US - interval * (burst - 1))
  local stored = tonumber(redis.call('GET', rate_key) or 0)
  if stored >= now_us - late_us then tat = stored end
  local allowed = math.max(0, math.floor((now_us + interval * burst - tat) / interval))
  if allowed < limit then limit, capped_by = allowed, 1 end
end

-- Lease by the plan: a first pass takes up to each level's quota, a second fills what is
-- left of the limit in the same order.
local deadline = now + lease_ms
local taken, popped, taken_ids = 0, 0, {}

local function take_one(id, priority)
  local key = job_prefix .. id
  local record = redis.pcall('HMGET', key, 's', 'p', 'n', 'm', 'qt', 'et')
  if record.err then
    bury_foreign(dead, seq, job_prefix, now, id, 'job record is not a hash')
    return
  end
  local state = record[1]
  if state == 'queued' then
    local attempts = tonumber(record[3] or 0) + 1
    redis.call('HSET', key, 's', 'active', 'w', lease, 'n', attempts, 'st', now)
    taken_ids[#taken_ids + 1] = id
    out[#out + 1] = id
    out[#out + 1] = record[2] or ''
    out[#out + 1] = attempts
    out[#out + 1] = tonumber(record[4] or 0)
    out[#out + 1] = waited_ms(record[5] or record[6])
    taken = taken + 1
  elseif not state and not is_done(done_prefix, id, now, span_ms) then
    bury_foreign(dead, seq, job_prefix, now, id, 'ready entry has no job record')
  elseif state == 'cancelled' then -- its last ready entry: the record may expire now
    expire_record(key, result_ttl_ms)
    if redis.call('HINCRBY', skipped, priority, -1) <= 0 then
      redis.call('HDEL', skipped, priority) -- (below 0: counted by an older version)
    end
  end
  -- any other state (a duplicate entry of a queued or running job): already recorded
end

local function drain(priority, want)
  local goal = math.min(limit, taken + want)
  while taken < goal do
    local ids = redis.call('LPOP', KEYS[READY + priority], goal - taken)
    if not ids then return end
    popped = popped + #ids
    for i = 1, #ids do take_one(ids[i], priority) end
  end
end

local partial = false -- any quota below the limit: a second pass may find more
for i = PLAN, #ARGV, 2 do
  local quota = tonumber(ARGV[i + 1])
  if quota < limit then partial = true end
  drain(tonumber(ARGV[i]), quota)
end
if partial then
  for i = PLAN, #ARGV, 2 do drain(tonumber(ARGV[i]), limit) end
end

-- (4) Record what this lease took (for a resend), and trim the notify tokens: one per
-- entry popped, less the one the caller's BLPOP consumed.
if taken > 0 then -- their leases, in one ZADD (all end at the same deadline)
  local leases = {}
  for i = 1, taken do leases[2 * i - 1], leases[2 * i] = deadline, taken_ids[i] end
  redis.call('ZADD', active, unpack(leases))
  redis.call('RPUSH', taken_key, unpack(taken_ids))
  redis.call('PEXPIRE', taken_key, lease_ms)
  if interval then -- kept while it can still be credited to a late start
    tat = tat + taken * interval
    local ttl_ms = math.max(1, math.ceil((tat + late_us - now_us) / 1000) + 1)
    redis.call('SET', rate_key, string.format('%.0f', tat), 'PX', ttl_ms)
  end
end
local every_level = (#ARGV - PLAN + 1) / 2 >= 10
if taken < limit and every_level then
  redis.call('DEL', notify) -- every ready list is empty now
elseif popped > woken then
  redis.call('LTRIM', notify, popped - woken, -1)
end
-- Held back, with jobs still ready: say until when. (Not by the notify tokens left: the
-- caller's BLPOP may have spent the only one.)
local function any_ready()
  for i = READY, READY + 9 do
    if redis.call('LLEN', KEYS[i]) > 0 then return true end
  end
  return false
end
if capped_by ~= 0 and taken == limit and any_ready() then
  if capped_by == -1 then
    out[4] = -1
  else -- the next start is allowed once tat - tau <= now
    out[4] = math.ceil((tat - interval * (burst - 1)) / 1000)
  end
end
return out
