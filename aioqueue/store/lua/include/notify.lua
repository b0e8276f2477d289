-- notify: one wake-up token per job made ready, so that as many blocked workers wake.
local function push_tokens(notify, count)
  if count == 1 then
    redis.call('RPUSH', notify, 1)
  elseif count > 1 then
    local tokens = {}
    for i = 1, count do tokens[i] = 1 end
    redis.call('RPUSH', notify, unpack(tokens))
  end
end
