"""The Redis layer: the only code that knows key names, record fields, Lua and the wire.

keys       every key name (one hash tag per queue)
records    the job record and the values scripts take and return (pure)
payload    the bytes a record holds: payload, result, error (pure)
loader     the Lua files, their shared snippets, EVALSHA with a reload
wire       commands packed by hand and sent on a pool connection (the hot path)
scripts    one typed function per Lua script
reads      typed reads of queue state (records, counts, listings)
specs      periodic specs stored per queue
heartbeats workers' heartbeats per queue
batching   concurrent enqueues coalesced into one script call per round trip
server     what the server is set to, where it matters (its eviction policy)
connection the App's Redis clients and their retry policy
embedded   a private redis-server for machines that have none
"""
