"""laraq's exit codes, every one of them (the table is in ``compat-docs/worker.md``, "Exit codes").

artisan's codes are kept (0 stopped, 1 error, 2 usage, 12 memory); the codes 3-6 name faults of the
surroundings, so a process manager or a script can tell "Redis is down" from "the password is wrong"
without reading logs (:func:`laraq.config.faults.explain` says which). This module imports nothing: the
``laraq work`` supervisor, which loads no laraq module, reads it too.
"""

EXIT_SUCCESS = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REDIS_UNREACHABLE = 3
EXIT_REDIS_AUTH = 4
EXIT_DATABASE = 5
EXIT_CONFIG = 6
#: over ``--memory`` (Laravel's ``Worker::EXIT_MEMORY_LIMIT``)
EXIT_MEMORY_LIMIT = 12
