-- gcra: a rate of one start every `interval` microseconds with bursts of up to `burst`,
-- kept by GCRA on the Redis clock in a key holding the theoretical arrival time (TAT, epoch
-- microseconds): the queue's rate (take.lua) and each tenant's (include/fair.lua). All in
-- whole microseconds: exact in a double (epoch ms with fractions lost a few 1e-4 ms, enough
-- to refuse every start of a "3/s" limit).
-- A start that comes late (a held-back worker's timer, a round trip) keeps its place in the
-- schedule, up to GCRA_LATE_US late in all (the burst's own tolerance counted): the next
-- start is due one interval after the late one's due time, not after its arrival, so a
-- rate is delivered whatever the workers' lateness (GCRA resets TAT to now: with burst 1
-- each late start was lost for good: 2 ms a start cost a 100/s limit 15-19 % of its rate).
-- Later than that (a quiet spell), the schedule starts afresh from now, with the burst. Over
-- any window, starts never run ahead of the rate by more than the burst or GCRA_LATE_US's
-- worth, whichever is more.
local GCRA_LATE_US = 20000

-- How many may start now, the TAT they count from, and how far in the past a TAT is kept
-- (GCRA_LATE_US less the burst's tolerance): the k-th start now is allowed while
-- tat + (k - 1) * interval <= now + tau, tau = (burst - 1) * interval.
local function gcra_allowed(key, now_us, interval, burst)
  local late_us = math.max(0, GCRA_LATE_US - interval * (burst - 1))
  local tat = now_us
  local stored = tonumber(redis.call('GET', key) or 0)
  if stored >= now_us - late_us then tat = stored end
  return math.max(0, math.floor((now_us + interval * burst - tat) / interval)), tat, late_us
end

-- `count` starts spent from `tat`: the new TAT, kept while it can still be credited to a
-- late start, and a second more. The key expires by the server's clock of the call's start
-- and TIME reads the clock as the call runs: were the key to go by the TAT alone, a call
-- that started late would lose it early (a fresh burst, ahead of the rate). A TAT kept
-- longer than it counts is ignored by gcra_allowed. Returns it.
local GCRA_KEPT_MS = 1000

local function gcra_spend(key, now_us, tat, count, interval, late_us)
  tat = tat + count * interval
  local ttl_ms = math.max(1, math.ceil((tat + late_us - now_us) / 1000) + GCRA_KEPT_MS)
  redis.call('SET', key, string.format('%.0f', tat), 'PX', ttl_ms)
  return tat
end

-- When (Redis-clock ms) the next start is allowed: once tat - tau <= now.
local function gcra_next_ms(tat, interval, burst)
  return math.ceil((tat - interval * (burst - 1)) / 1000)
end
