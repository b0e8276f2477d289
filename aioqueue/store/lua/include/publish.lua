-- publish: send a pub/sub message on one Redis server (PUBLISH). On a Redis Cluster the
-- loader includes publish_sharded instead.
local function publish(channel, message)
  redis.call('PUBLISH', channel, message)
end
