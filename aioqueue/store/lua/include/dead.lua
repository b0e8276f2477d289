-- dead: the dead jobs an admin call acts on: the ids given in ARGV[first..], or else the
-- oldest `limit` of the dead set.
local function chosen_dead(dead, limit, first)
  if #ARGV >= first then
    local ids = {}
    for i = first, #ARGV do ids[#ids + 1] = ARGV[i] end
    return ids
  end
  return redis.call('ZRANGE', dead, 0, limit - 1)
end

-- Delete a dead job's record, and its inputs if it is a workflow's parent (kept while it
-- was dead, for a requeue): only if the record is still dead (not enqueued again since).
local function delete_dead(job_prefix, inputs_prefix, id)
  local key = job_prefix .. id
  if redis.pcall('HGET', key, 's') == 'dead' then
    redis.call('DEL', key, inputs_prefix .. id)
  end
end
