--[[ progress: record how far a running job has got, only while the caller holds its lease
(a late write must not bring back a record that settled and went).

KEYS[1] job     HASH  the job record
ARGV[1] lease   the caller's lease token
ARGV[2] value   the progress, as JSON

Returns 1 if recorded, 0 if the job is no longer the caller's to report on.
]]
local record = redis.call('HMGET', KEYS[1], 's', 'w')
if record[1] ~= 'active' or record[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'pg', ARGV[2])
return 1
