-- numbers: integers as text, each formatted once a call. Lua writes a number into a
-- string, and Redis 7.0 a number given to redis.call, through printf's floating-point
-- path: a few of those per job were ~8 % of a drain's Redis CPU. (A script's top-level
-- locals live for one call, so the memo starts empty in every call.)
local number_texts = {}

local function text(n)
  local s = number_texts[n]
  if not s then
    s = string.format('%d', n)
    number_texts[n] = s
  end
  return s
end
