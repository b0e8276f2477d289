-- dead: the dead jobs an admin call acts on: the ids given in ARGV[2..], or else the
-- oldest `limit` of the dead set.
local function chosen_dead(dead, limit)
  if #ARGV > 1 then
    local ids = {}
    for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
    return ids
  end
  return redis.call('ZRANGE', dead, 0, limit - 1)
end
