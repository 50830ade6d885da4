"""The stores a worker shares with PHP: the cache (restart, pause, maintenance, unique locks,
``job-exceptions``), the failed-job providers (``Illuminate\\Queue\\Failed``) and the ``job_batches``
table a handler reads its batch from.
"""
