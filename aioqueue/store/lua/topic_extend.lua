--[[ topic_extend: renew the leases of a worker's running messages of one subscriber
group (their pending entries' idle time goes back to 0), for those it still owns.

KEYS[1] log       STREAM the topic's log
ARGV[1] group     the subscriber group
ARGV[2] consumer  the worker
ARGV[3..] ids     the messages it runs

Returns the ids whose lease it no longer holds (claimed by another worker, or trimmed).
]]
local log = KEYS[1]
local group, consumer, IDS = ARGV[1], ARGV[2], 3
local lost = {}
for i = IDS, #ARGV do
  local id = ARGV[i]
  local entry = redis.call('XPENDING', log, group, id, id, 1)[1]
  if entry and entry[2] == consumer then
    redis.call('XCLAIM', log, group, consumer, 0, id, 'JUSTID')
  else
    lost[#lost + 1] = id
  end
end
return lost
