--[[ progress: record how far a running job has got, only while the caller holds its lease
(a late write must not bring back a record that settled and went).

KEYS[1] job     HASH  the job record
ARGV[1] lease   the caller's lease token
ARGV[2] value   the progress, as JSON

Returns 1 if recorded, 0 if the job is no longer the caller's to report on.
]]
local job = KEYS[1]
local lease, value = ARGV[1], ARGV[2]
local record = redis.call('HMGET', job, 's', 'w')
if record[1] ~= 'active' or record[2] ~= lease then return 0 end
redis.call('HSET', job, 'pg', value)
return 1
