"""The flat import paths of laraq before its subpackages keep working, and say where the module went."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from laraq._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_and_warns(old: str) -> None:
    new = importlib.import_module("laraq." + MOVED[old])
    sys.modules.pop("laraq." + old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("laraq." + old)
    assert module is new
    assert any(issubclass(w.category, DeprecationWarning) and f"laraq.{MOVED[old]}" in str(w.message)
               for w in caught)


def test_from_imports_users_write_keep_working_in_a_fresh_interpreter() -> None:
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "from laraq import App, Dispatcher, Job, LaravelSettings, RedisQueue, loads, dumps, __version__\n"
        "from laraq.app import App as A2\n"
        "from laraq.worker import Worker, WorkerOptions\n"
        "from laraq.config import LaravelSettings as S2, redis_from_settings\n"
        "assert A2 is App and S2 is LaravelSettings\n"
        "warnings.simplefilter('ignore')\n"
        "from laraq.dispatch import Dispatcher as D2\n"
        "from laraq.job import Job as J2\n"
        "from laraq.serializer import loads as l2\n"
        "import laraq.queue\n"
        "assert D2 is Dispatcher and J2 is Job and l2 is loads and laraq.queue.RedisQueue is RedisQueue\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_an_unknown_module_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("laraq.no_such_module")
