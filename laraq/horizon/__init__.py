"""Horizon sees Python: laraq writes the Redis records Laravel Horizon's dashboard reads.

* :mod:`laraq.horizon.settings` - prefix, trim minutes and silenced classes (``config/horizon.php``);
* :mod:`laraq.horizon.version` - which Horizon release the app runs, and what each release changed;
* :mod:`laraq.horizon.records` - the job hashes, sorted sets, tags and metrics of each job
  (``RedisJobRepository``, ``RedisTagRepository``, ``RedisMetricsRepository``);
* :mod:`laraq.horizon.supervisors` - laraq workers as a master with supervisors
  (``RedisMasterSupervisorRepository``, ``RedisSupervisorRepository``, ``RedisHorizonCommandQueue``),
  with :mod:`laraq.horizon.relay`, the process whose pid the supervisor record carries;
* :mod:`laraq.horizon.trimming` - what Horizon's master trims, done by laraq when no PHP master runs;
* :mod:`laraq.horizon.listener` - the worker listener that ties them to laraq's job lifecycle.

What is written, when, and which Horizon versions were proven: ``compat-docs/horizon.md``.
"""

from laraq.horizon.records import HorizonPayload, HorizonRecords, php_microtime
from laraq.horizon.settings import HorizonSettings, HorizonTrim, horizon_in_use
from laraq.horizon.supervisors import NO_SIGNAL_PID, HorizonMaster
from laraq.horizon.trimming import Trimmer

__all__ = [
    "NO_SIGNAL_PID",
    "HorizonListener",
    "HorizonMaster",
    "HorizonPayload",
    "HorizonRecords",
    "HorizonSettings",
    "HorizonTrim",
    "Trimmer",
    "horizon_in_use",
    "php_microtime",
]


def __getattr__(name: str) -> object:
    if name == "HorizonListener":
        # The listener imports the worker package (laraq.worker.events), which ``laraq dispatch`` (it
        # imports laraq.horizon for HorizonSettings) never needs: loaded when asked for, for start-up time
        from laraq.horizon.listener import HorizonListener

        return HorizonListener
    raise AttributeError(name)
