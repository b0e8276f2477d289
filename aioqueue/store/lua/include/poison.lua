-- poison: bury an entry that is not an aioqueue job (raw bytes a third party pushed, or an
-- id whose record is gone or is not a hash), with its bytes kept, under a minted id
-- "poison-<n>" (n from the queue's seq counter; callers may not use ids in that namespace,
-- and a minted id skips any that has a record): nothing is dropped silently.
-- @include record
local function bury_foreign(dead, seq, job_prefix, now, entry, reason)
  local id = 'poison-' .. redis.call('INCR', seq)
  while redis.call('EXISTS', job_prefix .. id) == 1 do -- never over a record (an old id)
    id = 'poison-' .. redis.call('INCR', seq)
  end
  redis.call('HSET', job_prefix .. id, 's', 'dead', 'raw', entry, 'n', 0, 'et', now, 'ft', now,
    'e', error_json('PoisonEntry', reason))
  redis.call('ZADD', dead, now, id)
end
