"""aioqueue's testing kit: test your tasks, and the code that enqueues them, with no
Redis server (``pip install 'aioqueue[testing]'``).

- ``App(redis_url="memory://")``: an in-process Redis (fakeredis with Lua) that runs
  aioqueue's own Lua scripts, as Redis does (``aioqueue.store.memory``).
- ``await drain(app)`` / ``await run_jobs(app, queues=[...])``: run what was enqueued, what
  that enqueues, and the retries, in this process; how each job ended (``Ran``).
- ``await advance(app, seconds)``: move a memory:// server's clock, running the delayed
  jobs, retries and periodic ticks that fall due on the way.
- ``with app.eager():``: each enqueue runs its job before it returns (``App.eager``).
- The pytest plugin (``aioqueue.testing.plugin``, loaded by pytest by itself): the
  fixtures ``aioqueue_app``, ``aioqueue_url`` and ``aioqueue_isolate``, on memory:// by
  default or on a real server it starts (``--aioqueue-redis=real``).
"""

from ..worker.drain import JobOutcome, Ran
from .running import advance, drain, run_jobs

__all__ = ["JobOutcome", "Ran", "advance", "drain", "run_jobs"]
