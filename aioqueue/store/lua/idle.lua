--[[ idle: a consumer with nothing to do offers to be handed the next job, or withdraws
its offer. While the offer holds, enqueue.lua leases a new job to it (under the offer's
token, as a take would) and pushes it onto the offer's direct list, which the consumer
waits on in its BLPOP: the job starts one round trip after it is enqueued, not after a
wake-up and then a take.

KEYS[1]  idle        ZSET  offers: "<lease_ms> <token>" -> until when it holds (ms)
KEYS[2]  direct      LIST  the job handed under this offer's token, for the BLPOP
KEYS[3]  taken       LIST  ids leased under the token (enqueue.lua, as take.lua's own)
KEYS[4]  job_prefix        prefix of job records
KEYS[5]  taken_prefix      prefix of the taken lists (a lease token is appended)
ARGV[1]  member      "<lease_ms> <token>" (the token is the lease the job is handed under)
ARGV[2]  hold_ms     how long the offer holds from now (Redis clock); 0 withdraws it
ARGV[3]  forget      lease tokens, space-separated, whose jobs their consumer has: their
                     taken lists go (as take.lua's forget list)

Returns nothing for an offer (its token is new). A withdrawal ends the offer and returns
the jobs handed under it that are still leased to it, each as enqueue.lua pushes it onto
the direct list followed by '1' if its cancellation was asked meanwhile (else ''): one its
consumer never popped, or popped in a BLPOP whose reply was lost. A resent withdrawal
returns them again; the token's taken list goes with the consumer's next
offer or take (its forget list) or expires with the lease.
]]
-- @include clock
-- @include handed
local idle, direct, taken = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, taken_prefix = KEYS[4], KEYS[5]
local member, hold_ms, forget = ARGV[1], tonumber(ARGV[2]), ARGV[3]
for token in string.gmatch(forget or '', '%S+') do redis.call('DEL', taken_prefix .. token) end
if hold_ms > 0 then
  redis.call('ZADD', idle, redis_clock() + hold_ms, member)
  return {}
end
redis.call('ZREM', idle, member)
redis.call('DEL', direct)
local token = string.match(member, '^%d+ (.+)$')
local handed = {}
for _, id in ipairs(redis.call('LRANGE', taken, 0, -1)) do
  local record = redis.call('HMGET', job_prefix .. id, 's', 'w', 'm', 'p', 'ab')
  if record[1] == 'active' and record[2] == token then
    handed[#handed + 1] = handed_item(record[3], id, record[4])
    handed[#handed + 1] = record[5] or ''
  end
end
return handed
