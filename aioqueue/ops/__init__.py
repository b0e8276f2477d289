"""Operating aioqueue. Nothing below imports this; ops/ reads Redis through the Queue and
App API only, never ``store/``.

cli               the command line: parsing and dispatch (``python -m aioqueue``)
serve             ``aioqueue worker`` (one process or several) and ``aioqueue dashboard``
commands          the one-shot commands: check, info, jobs, job, queue, dead, reconcile
tables            what ``info`` and ``jobs`` print (rich tables)
logs              log formats of the command line (text, JSON)
garbage           garbage collection tuned for a worker process
metrics           Prometheus metrics: instrument(app), start_metrics_server()
metrics_depths    the queue depths a scrape reads (Metrics's base)
metrics_tallies   the counts the job callbacks keep, and the families a scrape fills
tracing           OpenTelemetry tracing: instrument(app)
embedded          a private redis-server on a free loopback port
embedded_cluster  a Redis Cluster of such servers (tests, benchmarks)
embedded_sentinel a Sentinel-managed master and replicas (tests, benchmarks)
"""
