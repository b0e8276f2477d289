-- record: a finished job record is kept `ttl_ms` (its status and result stay readable, and
-- its id stays an idempotency key), then expires; a ttl of 0 deletes it at once.
-- @include numbers
local function expire_record(key, ttl_ms)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', key, text(ttl_ms))
  else
    redis.call('DEL', key)
  end
end

-- The error field of a record, for an outcome decided inside Redis (no traceback).
local function error_json(error_type, message)
  return cjson.encode({type = error_type, message = message, traceback = ''})
end

-- A record's state, or 'foreign' if the key holds something that is not a hash (a queue
-- edited by hand): an enqueue skips such an id instead of failing the whole call midway
-- (the jobs before it in the call would keep records without their ready entries).
local function record_state(key)
  local state = redis.pcall('HGET', key, 's')
  if type(state) == 'table' and state.err then return 'foreign' end
  return state
end
