"""The producer side: what a web app imports and awaits. Below the App, above the store.

queue       Queue: the write path (EnqueueCall, enqueue, enqueue_many, debounce, groups)
admin       QueueAdmin, Queue's base: one job's reads, counts, listings, history, pause,
            limits, periodic specs, workers, dead letters
enqueue     per-call options (JobOptions) and the checks and encoding of a new job
job         Job: the handle on one enqueued job (status, result, cancel)
task        Task: a registered handler's typed handle (enqueue, callback)
workflows   flows, chains, chords and batches: jobs that wait for other jobs
trees       JobTree: a workflow's or batch's jobs written as one linked tree
messaging   mailboxes and groups (pull messaging with cursors)
topics      topics: durable fan-out to subscriber groups
"""
