--[[ recount_tenants: set each tenant's running count to the jobs of that tenant that hold
a lease now (the active set), and let a tenant held at its cap go back to the rings when
the recount leaves it room. A count drifts only when a leased job's record vanished (a
server that evicted keys, a hand edit): its lease's end could not say whose it was, so the
tenant kept it counted, and at its cap never started again. Reconcile runs this after its
repairs, and every change of the limits runs it: the first limit set starts the counts
(while no limit exists, none is kept: include/fair.lua), and a tenant held goes back to
the rings at once if the new limits let it (a raised cap, a limit removed), not at its next
job's end. Reads every active job's record (O(active)): an admin call, not routine.

KEYS[1]  active      ZSET  job id -> lease deadline (ms)
KEYS[2]  job_prefix        prefix of job records; carries the queue's hash tag
KEYS[3]  notify      LIST  wake-up tokens (for a tenant that may start again)
KEYS[4]  tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1]  tenant      the one tenant to recount ('': every tenant)

Returns how many tenants' counts were wrong (and are now right).
]]
-- @include clock
-- @include fair
local active, job_prefix, notify, tenants = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tenant = ARGV[1]
local function recounted(name) return tenant == '' or name == tenant end
local _, now_us = redis_clock()
local F = fair_context(tenants, notify, now_us)
-- Each held tenant goes back to the rings if its limits let it now (else it stays held).
local function unhold_held()
  local held = redis.call('HGETALL', F.held)
  for i = 1, #held, 2 do
    if recounted(held[i]) then fair_unhold(F, held[i]) end
  end
end
if redis.call('EXISTS', F.limits) == 0 then -- no limit: no count is kept
  redis.call('DEL', F.running)
  unhold_held()
  return 0
end
local leased = {}
for _, id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
  local owner = redis.call('HGET', job_prefix .. id, 'tn')
  if owner and recounted(owner) then leased[owner] = (leased[owner] or 0) + 1 end
end
local wrong = 0
local counted = redis.call('HGETALL', F.running)
for i = 1, #counted, 2 do
  local name, count = counted[i], tonumber(counted[i + 1])
  local now_leased = leased[name] or 0
  leased[name] = nil
  if recounted(name) and now_leased ~= count then
    wrong = wrong + 1
    if now_leased == 0 then
      redis.call('HDEL', F.running, name)
    else
      redis.call('HSET', F.running, name, now_leased)
    end
  end
end
for name, count in pairs(leased) do -- leased, and not counted at all
  wrong = wrong + 1
  redis.call('HSET', F.running, name, count)
end
unhold_held()
return wrong
