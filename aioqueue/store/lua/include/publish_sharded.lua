-- publish (Redis Cluster): sharded pub/sub (SPUBLISH, Redis 7). The message stays on the
-- shard that owns the channel's slot (every channel carries its queue's hash tag, so that
-- is the slot of the script's keys) instead of crossing the whole cluster bus.
local function publish(channel, message)
  redis.call('SPUBLISH', channel, message)
end
