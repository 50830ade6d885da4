"""Horizon sees Python: laraq writes the Redis records Laravel Horizon's dashboard reads.

* :mod:`laraq.horizon.settings` - prefix, trim minutes and silenced classes (``config/horizon.php``);
* :mod:`laraq.horizon.version` - which Horizon release the app runs, and what each release changed;
* :mod:`laraq.horizon.records` - the job hashes, sorted sets, tags and metrics of each job
  (``RedisJobRepository``, ``RedisTagRepository``, ``RedisMetricsRepository``);
* :mod:`laraq.horizon.supervisors` - laraq workers as a master with supervisors
  (``RedisMasterSupervisorRepository``, ``RedisSupervisorRepository``, ``RedisHorizonCommandQueue``),
  with :mod:`laraq.horizon.relay`, the process whose pid the supervisor record carries;
* :mod:`laraq.horizon.trimming` - what Horizon's master trims, done by laraq when no PHP master runs;
* :mod:`laraq.horizon.listener` - the worker listener that ties them to laraq's job lifecycle. It is the
  one module above the worker (it observes it); the others sit below the bus, which writes a dispatched
  job's pending record through them, so importing this package never loads the worker.

What is written, when, and which Horizon versions were proven: ``compat-docs/horizon.md``.
"""

from laraq.horizon.records import HorizonPayload, HorizonRecords, php_microtime
from laraq.horizon.settings import HorizonSettings, HorizonTrim, app_horizon, horizon_in_use
from laraq.horizon.supervisors import NO_SIGNAL_PID, HorizonMaster
from laraq.horizon.trimming import Trimmer

__all__ = [
    "NO_SIGNAL_PID",
    "HorizonMaster",
    "HorizonPayload",
    "HorizonRecords",
    "HorizonSettings",
    "HorizonTrim",
    "Trimmer",
    "app_horizon",
    "horizon_in_use",
    "php_microtime",
]

