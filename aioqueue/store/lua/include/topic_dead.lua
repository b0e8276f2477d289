-- topic_dead: dead-letter a subscriber group's message: a copy of its body (or, for an
-- entry that has none, its fields) with the reason goes to the topic's dead stream.
local function bury_message(log, dead, dead_max, group, id, attempts, error)
  local found = redis.call('XRANGE', log, id, id)[1]
  local body = ''
  if found then
    local fields = found[2]
    body = table.concat(fields, ' ')
    for i = 1, #fields, 2 do
      if fields[i] == 'b' then body = fields[i + 1] end
    end
  end
  local args = {'XADD', dead}
  if dead_max > 0 then args = {'XADD', dead, 'MAXLEN', '~', dead_max} end
  for _, value in ipairs({'*', 'g', group, 'm', id, 'n', attempts, 'e', error, 'b', body}) do
    args[#args + 1] = value
  end
  redis.call(unpack(args))
end
