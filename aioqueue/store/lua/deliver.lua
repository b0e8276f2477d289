--[[ deliver: count, in a parent's queue, the outcomes of its children that ran on other
queues (handed off by include/links.lua: another Cluster slot cannot be touched by the
script that settled the child). The worker that read them from the child's queue's
handoff ZSET removes them there after this call; a crash in between delivers them again,
which is harmless: a parent counts each child index once (an HSETNX into its inputs).

KEYS[1]      job_prefix           prefix of job records; carries the queue's hash tag
KEYS[2]      notify         LIST  wake-up tokens
KEYS[3]      schedule       ZSET  job id -> due time (ms)
KEYS[4]      schedule_wake  LIST  at most one token for pollers
KEYS[5..9]   links                the keys of include/links.lua, as QueueKeys.links():
             groups         HASH  group -> id of the job that holds it
             group_prefix         prefix of the groups' waiting lists
             inputs_prefix        prefix of the parents' inputs hashes
             handoff        ZSET  this queue's own outcomes for parents on yet other queues
             waiting        STRING how many jobs wait (behind a group, or for children)
KEYS[10..19] ready          LIST  ready lists of priorities 0..9
KEYS[20]     tenants        ZSET  the tenants with queued jobs; the prefix of the fair keys
                                  (a parent with a tenant is made ready on its list)
ARGV[1]      result_ttl_ms  how long a parent closed here (failed, or a barrier) is kept
ARGV[2]      settled_channel  the queue's settled channel: parents closed here are announced
ARGV[3..]    outcomes       three per outcome:
  .parents   the parents' ids, space-separated
  .position  the child's index among their children
  .outcome   "c" (complete) or "f" (failed) followed by its result or error JSON

Returns how many outcomes it read.
]]
-- @include clock
-- @include links
-- @include settled
-- @include fair
local job_prefix, notify, schedule, schedule_wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LINKS, READY, tenants = 5, 10, KEYS[20]
local result_ttl_ms, settled_channel, OUTCOMES = tonumber(ARGV[1]), ARGV[2], 3
local finished = {}
local now, now_us = redis_clock()
local L = links_context(LINKS, {
  job_prefix = job_prefix, ready = READY, notify = notify, schedule = schedule,
  schedule_wake = schedule_wake, now = now, result_ttl_ms = result_ttl_ms,
  finished = finished, fair = fair_context(tenants, notify, now_us),
})
for i = OUTCOMES, #ARGV, 3 do
  local outcome = ARGV[i + 2]
  report_to_parents(L, ARGV[i], ARGV[i + 1], string.sub(outcome, 1, 1) == 'c',
    string.sub(outcome, 2), nil)
end
announce_settled(settled_channel, finished)
return (#ARGV - OUTCOMES + 1) / 3
