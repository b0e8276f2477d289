--[[ promote: move due jobs from the schedule to their ready lists, in due order, with a
notify token each, and say when the next one is due. A promoter calls this when it has no
room to take what falls due (take.lua promotes and leases in one call otherwise); a burst
worker calls it to learn whether anything is still to come. Any number of callers may
promote at once: each due job is promoted exactly once. Entries that are not a scheduled
job are handled as in take.lua. A tenant's job goes on its tenant's list, and tenants held
by their rate whose time has come go back on their rings (include/fair.lua), as in a take.

KEYS[1]      schedule    ZSET  job id -> due time (ms)
KEYS[2]      notify      LIST  wake-up tokens, one per job promoted
KEYS[3]      dead        ZSET  job id -> time buried (ms), for foreign entries
KEYS[4]      seq         STRING counter for minted ids (poison entries)
KEYS[5]      job_prefix        prefix of job records; carries the queue's hash tag
KEYS[6..15]  ready       LIST  ready lists of priorities 0..9
KEYS[16]     tenants     ZSET  the tenants with queued jobs; the prefix of the fair keys
ARGV[1] limit   promote at most this many (bounds run time and unpack())
ARGV[2] front   1: promoted jobs go ahead of the jobs already ready (due first), 0: behind

Returns {now_us, promoted, next_due_ms}: the Redis clock in microseconds (so a promoter can
sleep to the exact due time), how many were promoted, and the schedule's head after this
call, or when a tenant held by its rate is due if that is sooner (-1 if neither).
]]
-- @include clock
-- @include promote_due
-- @include fair
local schedule, notify, dead, seq, job_prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local READY, tenants = 6, KEYS[16]
local limit, front = tonumber(ARGV[1]), ARGV[2] == '1'
local now, now_us = redis_clock()
local F = fair_context(tenants, notify, now_us)

local promoted = promote_due(schedule, notify, dead, seq, job_prefix, READY, now, limit, front, F)
local next_due = tonumber(redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')[2] or -1)
local tenant_due = fair_wake_due(F, now, limit)
if tenant_due >= 0 and (next_due < 0 or tenant_due < next_due) then next_due = tenant_due end
return {now_us, promoted, next_due}
