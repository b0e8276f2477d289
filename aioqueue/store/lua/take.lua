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
start every u microseconds with bursts of up to b (include/gcra.lua, on the Redis clock:
the rate key holds the theoretical arrival time, TAT). Jobs held back stay in ready, in
order.

The caller plans the order: it lists priority levels, each with a quota. A first pass takes
up to each level's quota in that order; a second pass fills what is left in the same
order. Strict priority is levels 9..0 with quotas of `limit`; a weighted plan (levels in
a weighted-random order, quotas by weight) keeps low levels from starving.

Tenants (include/fair.lua): a level whose ring has tenants serves them turn by turn, its
head up to its weight (tenants:weights) before it moves to the back, the level's plain
ready list taking turns with them as one more member ('', weight 1) while it has jobs;
within a tenant, FIFO. A tenant its limits hold (tenants:limits: a cap on its jobs leased
at once, a rate) leaves the ring as it comes up, noted in tenants:held; held by its rate,
it is due again (tenants:due) like a delayed job: the take or promotion after that time
puts it back (and a take that holds one wakes the promoters if it is due first). No
tenant with ready jobs: one EXISTS, and the ready lists are popped as ever.

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
KEYS[18]    done_prefix       prefix of the done sets (include/done.lua); carries the tag
KEYS[19]    paused    STRING set while the queue is paused: nothing is taken (promotion
                            goes on, so due jobs wait in ready for the resume)
KEYS[20]    limits    HASH  c (most leased at once), u (microseconds between starts), b (burst)
KEYS[21]    rate      STRING the rate's TAT (epoch microseconds); expires once it is past
KEYS[22]    schedule_wake LIST at most one token: wakes the promoters (a tenant held by its
                            rate is due before what they wait for)
KEYS[23]    tenants   ZSET  the tenants with queued jobs; the prefix of the fair keys
                            (include/fair.lua)
KEYS[24]    taken_prefix     prefix of the taken lists below; carries the queue's hash tag
KEYS[25]    taken     LIST  ids this lease token took (expires with the lease): if the same
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
to the exact due time), next_due_ms the schedule's head after this call, or when a tenant
held by its rate is due if that is sooner (-1 if neither, or if not promoting); held says
whether the queue's limits kept back jobs that are still ready (0: no; -1: the concurrency
cap; else the Redis-clock ms at which the rate allows the next start; ready jobs count
whether or not their notify tokens are left: a woken caller spent one; a tenant's own
limits never say so: its return wakes the workers);
waited_ms how long the job was ready before this take (since field qt, else its enqueue
time et; -1 if unknown), by the Redis clock.
]]
-- @include clock
-- @include done
-- @include record
-- @include poison
-- @include promote_due
-- @include fair
-- @include schedule
-- @include numbers
local active, notify, dead, seq, job_prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local READY, schedule, skipped, done_prefix = 6, KEYS[16], KEYS[17], KEYS[18]
local paused, limits_key, rate_key = KEYS[19], KEYS[20], KEYS[21]
local schedule_wake, tenants, taken_prefix, taken_key = KEYS[22], KEYS[23], KEYS[24], KEYS[25]
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

-- (2) Promote due jobs first, so the take below can lease them; and tenants held by their
-- rate whose time has come go back on their rings.
local F = fair_context(tenants, notify, now_us)
if promote > 0 then
  out[2] = promote_due(schedule, notify, dead, seq, job_prefix, READY, now, promote, front, F)
  local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  out[3] = tonumber(head[2] or -1)
end
local fair = redis.call('EXISTS', F.ready, F.due) > 0 -- any tenant with jobs ready or due
if fair then
  local tenant_due = fair_wake_due(F, now, 100)
  if promote > 0 and tenant_due >= 0 and (out[3] < 0 or tenant_due < out[3]) then
    out[3] = tenant_due
  end
end

-- (3) The queue's limits: how many may start now (include/gcra.lua for the rate).
local limits = limit > 0 and redis.call('HMGET', limits_key, 'c', 'u', 'b') or {}
local capped_by, interval, burst = 0, tonumber(limits[2]), tonumber(limits[3] or 1)
local tat, late_us = now_us, 0
if limits[1] then
  local room = math.max(0, tonumber(limits[1]) - redis.call('ZCARD', active))
  if room < limit then limit, capped_by = room, -1 end
end
if interval then
  local allowed
  allowed, tat, late_us = gcra_allowed(rate_key, now_us, interval, burst)
  if allowed < limit then limit, capped_by = allowed, 1 end
end

-- Lease by the plan: a first pass takes up to each level's quota, a second fills what is
-- left of the limit in the same order.
local deadline = now + lease_ms
local taken, popped, taken_ids = 0, 0, {}

-- Leases one popped entry; returns 1 if it leased it, 2 for a cancelled job's entry.
local function take_one(id, priority)
  local key = job_prefix .. id
  local record = redis.pcall('HMGET', key, 's', 'p', 'n', 'm', 'qt', 'et')
  if record.err then
    bury_foreign(dead, seq, job_prefix, now, id, 'job record is not a hash')
    return 0
  end
  local state = record[1]
  if state == 'queued' then
    local attempts = tonumber(record[3] or 0) + 1
    redis.call('HSET', key, 's', 'active', 'w', lease, 'n', text(attempts), 'st', text(now))
    taken_ids[#taken_ids + 1] = id
    out[#out + 1] = id
    out[#out + 1] = record[2] or ''
    out[#out + 1] = attempts
    out[#out + 1] = tonumber(record[4] or 0)
    out[#out + 1] = waited_ms(record[5] or record[6])
    taken = taken + 1
    return 1
  elseif not state and not is_done(done_prefix, id, now, span_ms) then
    bury_foreign(dead, seq, job_prefix, now, id, 'ready entry has no job record')
  elseif state == 'cancelled' then -- its last ready entry: the record may expire now
    expire_record(key, result_ttl_ms)
    if redis.call('HINCRBY', skipped, priority, -1) <= 0 then
      redis.call('HDEL', skipped, priority) -- (below 0: counted by an older version)
    end
    return 2
  end
  -- any other state (a duplicate entry of a queued or running job): already recorded
  return 0
end

-- Tenants: a level's ring served turn by turn (the header says how). Made only for a take
-- that has tenants to serve: a plain take pays nothing for these functions.
local function tenant_server()
  -- The config hashes are looked at only if they exist (weights: read once a take).
  local weights, has_limits = {}, redis.call('EXISTS', F.limits) == 1
  local any_held = redis.call('EXISTS', F.held) == 1
  if redis.call('EXISTS', F.weights) == 0 then weights = nil end

  -- A tenant its limits hold leaves ring `level` (it is at the back: its turn was taken),
  -- noted in tenants:held; held by its rate (`due` > 0), it is due again then, and the
  -- promoters are woken if nothing they wait for comes sooner.
  local function park(level, tenant, due)
    redis.call('RPOP', F.ring_prefix .. level)
    local levels = redis.call('HGET', F.held, tenant) or ''
    if not string.find(levels, level, 1, true) then
      redis.call('HSET', F.held, tenant, levels .. level)
    end
    any_held = true
    if due <= 0 then return end
    redis.call('ZADD', F.due, due, tenant)
    local head = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')[2]
    if redis.call('ZRANGE', F.due, 0, 0)[1] == tenant and (not head or tonumber(head) > due) then
      wake_promoters(schedule_wake, due)
    end
  end

  local function weight_of(tenant)
    if not weights then return 1 end
    local weight = weights[tenant]
    if not weight then
      weight = math.max(1, tonumber(redis.call('HGET', F.weights, tenant) or 1) or 1)
      weights[tenant] = weight
    end
    return weight
  end

  -- A turn of `member` of ring `level` (a tenant, or '' for the plain list), moved from the
  -- ring's head to its back as its turn began: up to `want` jobs, within what is left of its
  -- turn (`used` of its weight had: tenants:turn) and its limits; alone on the ring (`size`),
  -- a tenant's turn is all it may take. Then it leaves the ring (its list is empty, and gone),
  -- is parked (its limits hold it now), stays at the back (its turn is over), or goes back
  -- to the head (the take's goal was met mid-turn). Returns how it went ('left', 'parked',
  -- 'over', 'head', or 'alone': the plain list left a ring it had to itself, and the caller
  -- pops it as ever), and how much of its turn it had.
  local function turn(level, member, want, used, size)
    local plain = member == ''
    local list = plain and KEYS[READY + level] or fair_list(F, level, member)
    local weight, room, due, rate_tat, rate_late = 1, math.huge, 0, nil, 0
    if not plain then
      weight = size == 1 and math.huge or weight_of(member)
      if has_limits then
        room, due, rate_tat, rate_late = tenant_room(F, member)
        if room <= 0 then
          park(level, member, due)
          return 'parked', 0
        end
      end
      if any_held then fair_unhold(F, member) end -- (held elsewhere, but no longer)
    end
    local count = math.min(want, weight - used, room)
    local ids = count > 0 and redis.call('LPOP', list, count) or {}
    local leased, cancelled = 0, 0
    for i = 1, #ids do
      local code = take_one(ids[i], level)
      if code == 1 then leased = leased + 1 elseif code == 2 then cancelled = cancelled + 1 end
    end
    popped = popped + #ids
    if not plain and #ids > cancelled then -- (a cancelled job was counted off by cancel.lua)
      count_queued(F, member, cancelled - #ids)
    end
    if not plain and leased > 0 and has_limits then -- (counted only for the limits)
      redis.call('HINCRBY', F.running, member, leased)
      if rate_tat then
        gcra_spend(F.rate_prefix .. member, now_us, rate_tat, leased, tenant_limits(F, member)[2],
          rate_late)
      end
    end
    used = used + leased
    if #ids < count or redis.call('LLEN', list) == 0 then -- nothing left: it leaves the ring
      redis.call('RPOP', F.ring_prefix .. level)
      if plain then redis.call('HDEL', F.turn, 'plain:' .. level) end
      return 'left', #ids
    elseif leased >= room then
      room, due = tenant_room(F, member)
      if room <= 0 then -- its limits hold it now
        park(level, member, due)
        return 'parked', #ids
      end
    end
    if plain and size == 1 then -- alone: popped as ever from now on
      redis.call('RPOP', F.ring_prefix .. level)
      redis.call('HDEL', F.turn, 'plain:' .. level)
      return 'alone', #ids
    elseif used >= weight or count <= 0 then
      return 'over', #ids
    end
    redis.call('LMOVE', F.ring_prefix .. level, F.ring_prefix .. level, 'RIGHT', 'LEFT')
    return 'head', #ids, used
  end

  -- Serves the ring of `level`, if it has one, until `goal` jobs are taken in all or it is
  -- empty; the plain list joins it first if it has jobs. Then the caller pops the plain
  -- list as ever (it has nothing, or the ring was down to it alone).
  local function serve_ring(level, goal)
    local ring = F.ring_prefix .. level
    local size = redis.call('LLEN', ring)
    if size == 0 then return end
    local flag = 'plain:' .. level
    if redis.call('HEXISTS', F.turn, flag) == 0 and redis.call('LLEN', KEYS[READY + level]) > 0 then
      redis.call('RPUSH', ring, '')
      redis.call('HSET', F.turn, flag, 1)
      size = size + 1
    end
    local stored = tonumber(redis.call('HGET', F.turn, level) or 0)
    local used, entries = stored, 0 -- the head's turn so far; entries off the tenants' lists
    while taken < goal and size > 0 do
      local member = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
      if not member then break end
      local how, n, had = turn(level, member, goal - taken, used, size)
      if member ~= '' then entries = entries + n end
      used = had or 0
      if how == 'alone' then break end
      if how == 'left' or how == 'parked' then size = size - 1 end
    end
    if used > 0 and used ~= stored then
      redis.call('HSET', F.turn, level, used)
    elseif used == 0 and stored > 0 then
      redis.call('HDEL', F.turn, level)
    end
    if entries > 0 and redis.call('HINCRBY', F.ready, level, -entries) <= 0 then
      redis.call('HDEL', F.ready, level)
    end
  end
  return serve_ring
end
local serve_ring = fair and tenant_server()

local function drain(priority, want)
  local goal = math.min(limit, taken + want)
  if serve_ring then serve_ring(priority, goal) end
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
  local until_text = text(deadline)
  for i = 1, taken do leases[2 * i - 1], leases[2 * i] = until_text, taken_ids[i] end
  redis.call('ZADD', active, unpack(leases))
  redis.call('RPUSH', taken_key, unpack(taken_ids))
  redis.call('PEXPIRE', taken_key, lease_ms)
  if interval then tat = gcra_spend(rate_key, now_us, tat, taken, interval, late_us) end
end
local every_level = (#ARGV - PLAN + 1) / 2 >= 10
if taken < limit and every_level then
  redis.call('DEL', notify) -- every ready list is empty now (a held tenant's return
  -- pushes its jobs' tokens again)
elseif popped > woken then
  redis.call('LTRIM', notify, popped - woken, -1)
end
-- Held back by the queue's limits, with jobs still ready: say until when. (Not by the
-- notify tokens left: the caller's BLPOP may have spent the only one.)
local function any_ready()
  if fair and redis.call('EXISTS', F.ready) == 1 then return true end
  for i = READY, READY + 9 do
    if redis.call('LLEN', KEYS[i]) > 0 then return true end
  end
  return false
end
if capped_by ~= 0 and taken == limit and any_ready() then
  if capped_by == -1 then
    out[4] = -1
  else
    out[4] = gcra_next_ms(tat, interval, burst)
  end
end
return out
