-- poison: bury an entry that is not an aioqueue job (raw bytes a third party pushed, or an
-- id whose record is gone or is not a hash), with its bytes kept, under a minted id
-- "poison-<n>" (n from the queue's seq counter): nothing is dropped silently.
-- @include record
local function bury_foreign(dead, seq, job_prefix, now, entry, reason)
  local id = 'poison-' .. redis.call('INCR', seq)
  redis.call('HSET', job_prefix .. id, 's', 'dead', 'raw', entry, 'n', 0, 'et', now, 'ft', now,
    'e', error_json('PoisonEntry', reason))
  redis.call('ZADD', dead, now, id)
end
