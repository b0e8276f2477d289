"""The Redis layer: all of aioqueue's Redis I/O, and the only code that sends Lua (key names
come from ``core/keys``, record fields from ``core/records``).

lua/          the Lua scripts, one file per atomic step, and their shared snippets (include/)
scripts/      one typed function per script, a module per family (listed in its docstring),
              and the one table of return codes
layout        each script's KEYS and ARGV, read from its header: the one place they are stated
loader        the Lua files, their shared snippets, EVALSHA with a reload
wire          commands packed by hand and sent on a pool connection (the hot path)
routing       where packed calls go: the client's pool, or a Cluster's node by key slot
slots         a queue's MULTI/EXEC (counts, settings) on its Cluster node, redirects followed
coalescing    calls waiting while one is in flight, flushed together (both below share it)
batching      concurrent enqueues coalesced into one script call per round trip
posting       concurrent single posts to one log (mailbox, group, topic) merged likewise
reads         typed reads of queue state (records, counts, history, messages)
listing       pages of a queue's jobs: where they are, or walked for what they are
settled       hearing that jobs finished (the settled channel), for Job.result()
pubsub        listening on a pub/sub connection that may have died without a word
streams       a topic's plain stream commands (its subscriber groups)
handoffs      workflow outcomes waiting for their parents' queue, read and removed
specs         periodic specs stored per queue
heartbeats    workers' heartbeats per queue
stored_limits a queue's limits, as the hash take.lua obeys
tenants       a queue's tenants: their weights and limits, the ones with jobs ready, and a
              priority's ready jobs in the order take serves its tenants
server        what the server is set to, where it matters (its eviction policy)
connection    the App's Redis clients, their retry policy, and Redis failures as errors
deadline      one total deadline per public call, retries included; the retry policy
sentinel      following a Sentinel-managed master through failovers, planned or not
following     the connections that follow it (and refuse a demoted master)
clients       the App's clients over their life: made per event loop, and closed
memory        memory:// URLs: an in-process server (fakeredis with Lua) for tests, its clock
memory_server what memory:// changes in fakeredis to behave as Redis does (or refuse)
"""
