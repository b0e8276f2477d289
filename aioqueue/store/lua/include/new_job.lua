-- new_job: what an enqueue decides about a job it is asked to write, before writing it.
-- @include done
-- @include record

-- The state of the job whose record is `key`: its record's, 'complete' if it completed
-- with no result within the idempotency window (its id in a done set), else nil: new.
local function known_state(key, done_prefix, id, now, span_ms)
  local state = record_state(key)
  if not state and is_done(done_prefix, id, now, span_ms) then state = 'complete' end
  return state
end

-- When a job is due (ms, Redis clock): `delay_ms` from now or at `due_ms` (epoch), the
-- later of the two, either <= 0 for none; 0 for neither (due now).
local function due_time(now, delay_ms, due_ms)
  local due = 0
  if delay_ms > 0 then due = now + delay_ms end
  if due_ms > due then due = due_ms end
  return due
end
