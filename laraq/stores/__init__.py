"""The stores a worker shares with PHP: the cache (restart, pause, maintenance, unique locks,
``job-exceptions``), the failed-job providers (``Illuminate\\Queue\\Failed``) and the ``job_batches``
table a handler reads its batch from.

The cache interface and value rules (:mod:`.cache_base`), the Redis store and the store factory
(:mod:`.cache`), the file and database stores (:mod:`.cache_stores`); the failed-job providers
(:mod:`.failed`) with the exception text they store (:mod:`.php_exceptions`), and the failures parked in
Redis while the failed-job store cannot be written (:mod:`.parked`); the app's SQL connections
(:mod:`.database`); a job's batch (:mod:`.batches`).
"""
