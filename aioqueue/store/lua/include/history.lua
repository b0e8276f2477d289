-- history: how many attempts ended in each outcome, per minute, for a bounded window (the
-- info command and the dashboard read it). One hash per hour, `<history_prefix><hour>`,
-- with a field `<minute of the hour>:<code>` per outcome (c complete, r retry, f failed,
-- d dead, x cancelled); `counts` maps code -> n, so a batch costs one HINCRBY per outcome
-- it had, not one per job. A window of 0 keeps no history.
local function count_history(history_prefix, now, window_ms, counts)
  if window_ms <= 0 then return end
  local history_key = history_prefix .. math.floor(now / 3600000)
  local minute = math.floor(now / 60000) % 60
  local any = false
  for code, n in pairs(counts) do
    if n > 0 then
      redis.call('HINCRBY', history_key, minute .. ':' .. code, n)
      any = true
    end
  end
  if any then redis.call('PEXPIRE', history_key, window_ms + 3600000) end
end
