"""The core: what aioqueue means, with no I/O. Every other layer builds on it.

errors      every exception, the tree in its docstring
settings    the App's and the Worker's settings, validated once; every default
keys        every Redis key name (one hash tag per queue, mailbox, group or topic)
records     the job record's fields and the views read from it (JobInfo, QueueCounts, ...)
lifecycle   the values each step of a job's life takes and returns (NewJob, Taken, Settlement)
payload     the bytes a record holds: payload, result, error
handlers    a registered handler and its options (TaskOptions, Handler, Subscriber)
registry    what an App registers (tasks, subscribers, periodic specs, hooks, middleware,
            observers), which the worker receives
backoff     retry delays
priorities  priority levels, and the plan a take follows across them
limits      a queue's concurrency cap and rate
periodic    cron and interval specs, and their ticks
middleware  middleware, hooks, and the running job's context
observers   the callbacks metrics and tracing hang on
"""

__version__ = "0.1.0"
