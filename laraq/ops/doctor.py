"""``laraq doctor``: read-only checks of a Laravel Redis queue set-up, each finding with its fix.

Checks (all with ``SCAN`` and bounded samples, never ``KEYS``):

* Redis reachable; queue keys under the configured prefix, or under *another* prefix (the 12→13
  ``laravel_database_`` → ``laravel-database-`` change, an ``APP_NAME`` change);
* which Laravel line the payloads look like (``createdAt`` 12.11+, ``batchId`` 12.51+,
  ``deleteWhenMissingModels`` 13+, no ``failOnTimeout`` < 8.43) against ``--laravel``;
* members that are not JSON job payloads (a phpredis ``serializer``/``compression`` option on the
  queue connection; Laravel's own pop would lose them) and laraq's ``:poison`` lists;
* the worker ``--timeout`` (and per-job ``timeout``) against ``retry_after`` (jobs run twice);
* reservations already expired and delayed jobs already due piling up (no worker is running);
* ``:notify`` lists far longer than their queues (harmless drift, but wasted memory);
* job classes with no Python handler in ``--app``; jobs using ``RateLimited(name)`` for a limiter the app
  does not declare (``app.rate_limiter``); jobs with a handler that carry middleware laraq
  does not run (they go back to PHP), or chains/batches that laraq hands to PHP (continuations), and
  continuation jobs waiting for a PHP worker;
* Horizon keys (run ``laraq work`` with Horizon's records so Horizon sees laraq's work), and PHP workers
  (Horizon supervisors) on a queue laraq takes Python jobs from (:mod:`laraq.config.phpworkers`);
* the configuration: where it was read (the app's cached config, the booted app, an exported file, or only
  ``.env``), each value with its source, and the values laraq assumed.

``queues`` (``doctor --queue``) limits the queue checks to those queues.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from laraq.app import load_app
from laraq.bus.handoff import is_continuation
from laraq.bus.handoffcheck import check_handoff
from laraq.bus.middleware import limiter_names, unsupported_names
from laraq.config.phpworkers import php_worked_queues, shared_queue_warnings
from laraq.config.provenance import setting_facts
from laraq.config.settings import LaravelSettings
from laraq.horizon.phpwait import php_only_waiting, read_php_waiting
from laraq.ops.inspect import discover_prefixes, discover_queues, iter_members, queue_status
from laraq.ops.transfers import held_findings
from laraq.protocol.discovery import expand, is_pattern
from laraq.protocol.lua_laraq import DEEP_REACH
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.queue import RedisQueue
from laraq.protocol.serializer import loads
from laraq.stores.parked import parked_key, parked_summary

__all__ = ["Finding", "diagnose"]

#: Members sampled per queue and state.
SAMPLE = 200


@dataclass(frozen=True)
class Finding:
    """One result: ``level`` is ``ok``, ``info``, ``warn`` or ``error``."""

    level: str
    title: str
    detail: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _looks_serialized(member: bytes) -> str | None:
    """A guess at what wrote a non-JSON member."""
    if member[:2] in (b"s:", b"a:", b"O:", b"i:"):
        return "phpredis serializer=php"
    if member[:4] == b"\x00\x00\x00\x02":
        return "phpredis serializer=igbinary"
    if member[:1] in (b"\x92", b"\xa0", b"\xd9", b"\xda") or member[:1] and 0x80 <= member[0] <= 0x9f:
        return "phpredis serializer=msgpack"
    if member[:4] == b"\x28\xb5\x2f\xfd":
        return "phpredis compression=zstd"
    if member[:1] in (b"{", b"["):
        return None
    return "phpredis compression (lzf/lz4) or a foreign producer"


def _version_hints(decoded: dict[str, Any]) -> list[str]:
    hints = []
    if "deleteWhenMissingModels" in decoded:
        hints.append("13")
    elif isinstance(decoded.get("data"), dict) and "batchId" in decoded["data"]:
        hints.append("12.51+")
    elif "createdAt" in decoded:
        hints.append("12.11+")
    elif "failOnTimeout" not in decoded:
        hints.append("<8.43")
    else:
        hints.append("8.43–12.10")
    if isinstance(decoded.get("pushedAt"), str) or "tags" in decoded and "silenced" in decoded:
        hints.append("horizon")
    return hints


#: The payload families of :func:`_version_hints`, oldest first.
_HINT_ORDER = ("<8.43", "8.43–12.10", "12.11+", "12.51+", "13")


def _expected_hint(version: Any) -> str:
    if version.major >= 13:
        return "13"
    if version.since("12.51"):
        return "12.51+"
    if version.since("12.11"):
        return "12.11+"
    if not version.since("8.43"):
        return "<8.43"
    return "8.43–12.10"


def _note_job_model(payload: Payload, queue_name: str, notes: dict[tuple[str, str, str], int]) -> None:
    """Count what PHP must finish for this job (chain, batch, middleware laraq does not run)."""
    if is_continuation(payload.display_name):
        key = ("continuation", queue_name, "")
        notes[key] = notes.get(key, 0) + 1
        return
    text = payload.command
    if not text or not text.startswith("O:"):
        return
    try:
        command = loads(text.encode("utf-8"))
    except Exception:
        return
    job = payload.command_name or payload.resolve_name
    found = [("middleware", ", ".join(unsupported_names(command)))] if unsupported_names(command) else []
    found += [("limiter", name) for name in dict.fromkeys(limiter_names(command))]
    if command.get("chained") or command.get("chainCatchCallbacks"):
        found.append(("chain", ""))
    if command.get("batchId"):
        found.append(("batch", ""))
    for kind, detail in found:
        notes[(kind, job, detail)] = notes.get((kind, job, detail), 0) + 1


def _job_model_findings(notes: dict[tuple[str, str, str], int], app: Any, samples: dict[str, Payload],
                        has_app_key: bool) -> list[Finding]:
    out = []
    handled = {name for name, payload in samples.items() if app.resolve(payload) is not None}
    for (kind, name, detail), n in sorted(notes.items()):
        if kind == "continuation":
            out.append(Finding(
                "info", f"queue {name!r}: {n} laraq continuation job(s) waiting for a PHP worker",
                "chain steps, batch bookkeeping, uniqueId() locks or failed() that laraq handed to PHP",
                f"run php artisan queue:work on {name!r} (or point laraq work --php-queue at a queue PHP serves)"))
        elif name not in handled:
            continue
        elif kind == "middleware":
            out.append(Finding(
                "warn", f"{n} {name} job(s) carry job middleware laraq does not run: {detail}",
                "laraq sends these back to PHP untouched (never runs them around a bypassed middleware)",
                "leave this class to PHP workers, or drop the middleware / use WithoutOverlapping"))
        elif kind == "limiter":
            if detail not in getattr(app, "rate_limiters", {}):
                out.append(Finding(
                    "warn", f"{n} {name} job(s) use RateLimited({detail!r}): the app declares no rate limiter "
                    f"{detail!r}",
                    "PHP's limiter is a closure (RateLimiter::for) laraq cannot run, so these go back to PHP",
                    f"declare app.rate_limiter({detail!r}, per_minute=..., by=...) with PHP's limits, or leave "
                    "this class to PHP workers"))
        elif not has_app_key:
            out.append(Finding(
                "error", f"{n} {name} job(s) are part of a {kind}, and APP_KEY is not set",
                "laraq hands a chain's next step / a batch's bookkeeping to PHP in a signed job; without "
                "APP_KEY it cannot, so it sends these jobs back to PHP", "set APP_KEY (or --env-file)"))
        else:
            out.append(Finding(
                "info", f"{n} {name} job(s) are part of a {kind}",
                "laraq runs them and hands the next step / the batch bookkeeping to PHP (a continuation job)",
                "make sure a PHP worker serves laraq work's --php-queue (default: the default queue)"))
    return out


def diagnose(
    settings: LaravelSettings,
    queue: RedisQueue,
    *,
    app_ref: str | None = None,
    worker_timeout: int = 60,
    queues: list[str] | None = None,
) -> list[Finding]:
    """Run every check; findings come in the order of the module docstring."""
    out: list[Finding] = config_findings(settings)
    client = queue.client
    try:
        client.ping()
    except Exception as exc:
        return [Finding("error", f"cannot reach Redis at {queue.redacted_url()}", str(exc),
                        "check REDIS_HOST/REDIS_PORT/REDIS_PASSWORD (or --env-file)")]
    out.append(Finding("ok", f"Redis reachable at {queue.redacted_url()}"))

    # -- prefixes and queues
    names = discover_queues(client, queue.prefix)
    for pattern in [q for q in queues or [] if is_pattern(q)]:  # a --queue pattern: the queues it matches now
        matched = expand(queue, [pattern])
        shown = ", ".join(matched[:20]) + (f" and {len(matched) - 20} more" if len(matched) > 20 else "")
        out.append(Finding("ok" if matched else "info", f"pattern {pattern!r} matches {len(matched)} queue(s)"
                           + (f": {shown}" if matched else ""), "found with a bounded SCAN, as laraq work finds them"))
    if queues:
        queues = expand(queue, queues)
        missing = [q for q in queues if q not in names]
        if missing:
            out.append(Finding("info", f"no keys for queue(s) {', '.join(missing)} under prefix {queue.prefix!r}",
                               "an empty queue has no keys"))
        names = [q for q in queues if q in names]
    prefixes = {p: n for p, n in discover_prefixes(client).items() if p != queue.prefix}
    if names:
        out.append(Finding("ok", f"{len(names)} queue(s) under prefix {queue.prefix!r}: {', '.join(names[:20])}"))
    else:
        out.append(Finding(
            "warn", f"no queue keys under prefix {queue.prefix!r}",
            "an empty queue has no keys, so this is expected when nothing is queued",
            "if jobs are queued, point laraq at the app's prefix: --env-file /path/to/.env, REDIS_PREFIX or "
            "--prefix (laraq doctor lists other prefixes it finds below)",
        ))
    if prefixes:
        listing = ", ".join(f"{p!r} ({n} keys)" for p, n in sorted(prefixes.items(), key=lambda x: -x[1])[:5])
        level = "error" if not names else "warn"
        out.append(Finding(
            level, "queue keys exist under other prefixes", listing,
            "set REDIS_PREFIX (or --prefix) to the prefix your PHP app uses; to move jobs across a prefix "
            "change (e.g. Laravel 12 → 13's 'laravel-database-'), run: laraq move QUEUE --to-prefix NEW",
        ))

    out.extend(Finding(*held) for held in held_findings(client, queue.prefix))  # moves still holding jobs

    # -- members
    hints: dict[str, int] = {}
    model_notes: dict[tuple[str, str, str], int] = {}
    job_samples: dict[str, Payload] = {}  # one payload per job name, to ask the --app which it handles
    max_job_timeout = 0
    for name in names:
        bad: dict[str, int] = {}
        for state in ("pending", "delayed", "reserved"):
            for count, (member, _score, _i) in enumerate(iter_members(queue, name, state, batch=SAMPLE)):
                if count >= SAMPLE:
                    break
                try:
                    payload = Payload.parse(member)
                except PayloadError:
                    kind = _looks_serialized(member) or "not a job payload (no numeric attempts)"
                    bad[kind] = bad.get(kind, 0) + 1
                    continue
                for hint in _version_hints(payload.decoded):
                    hints[hint] = hints.get(hint, 0) + 1
                job_samples.setdefault(payload.command_name or payload.resolve_name, payload)
                _note_job_model(payload, name, model_notes)
                with contextlib.suppress(PayloadError):
                    max_job_timeout = max(max_job_timeout, payload.timeout or 0)
        for kind, n in bad.items():
            out.append(Finding(
                "error", f"queue {name!r}: {n} member(s) that are not JSON job payloads", kind,
                "remove the 'serializer'/'compression' options from the queue's Redis connection "
                "(config/database.php); Laravel's own pop script drops such members. Inspect them with "
                f"laraq list {name} --json --raw",
            ))
        status = queue_status(queue, name)
        if status.poison:
            out.append(Finding(
                "warn", f"queue {name!r}: {status.poison} member(s) in laraq's poison list",
                f"{queue.keys(name).poison} holds members the pop script could not reserve",
                f"look at them: laraq list {name} --state poison --json --raw; delete with laraq clear {name} "
                "--poison once handled",
            ))
        for parked in parked_summary(queue, [name]).values():
            out.append(Finding(
                "warn", f"queue {name!r}: {parked['count']} failed job(s) parked: their failed_jobs row is not "
                "written yet", f"the failed-job store refused their rows; they are kept in {parked_key(queue, name)} "
                f"and not run again (latest: {str(parked['newest_exception'])[:200]})",
                "bring the failed-job database back: a running laraq worker on this queue writes the rows "
                "within 15 s, or at its next start",
            ))
        if status.expired_reserved:
            out.append(Finding(
                "warn", f"queue {name!r}: {status.expired_reserved} expired reservation(s) not migrated back",
                "a worker moves them back to the list on its next pop; if they pile up no worker is polling "
                "this queue" + (" (retry_after is null: reservations never expire)" if queue.retry_after is None
                                else ""),
                f"start a worker for {name!r} (php artisan queue:work --queue={name} or laraq work)",
            ))
        if status.pending > 2 * DEEP_REACH:
            out.append(Finding(
                "info", f"queue {name!r}: {status.pending} jobs in the list: a Python job more than {DEEP_REACH} "
                "from both of its ends is not taken while the jobs for PHP ahead of it wait",
                "laraq takes Python jobs from behind jobs for PHP (--unhandled leave), within that reach of "
                "either end; the worker logs a warning and the laraq_jobs_out_of_reach gauge counts any it sees",
                f"keep PHP workers taking {name!r}'s jobs for PHP, or give the Python jobs a queue of their own",
            ))
        if status.due_delayed > 100:
            out.append(Finding(
                "warn", f"queue {name!r}: {status.due_delayed} delayed job(s) already due",
                "due jobs are migrated only when a worker pops this queue", f"start a worker for {name!r}",
            ))
        if status.notify > status.pending + 1000:
            out.append(Finding(
                "info", f"queue {name!r}: :notify drift ({status.notify} tokens for {status.pending} jobs)",
                "the :notify list only wakes blocking pops (block_for); extra tokens cause empty wake-ups",
                f"redis-cli DEL {queue.keys(name).notify} (safe; Laravel's queue:clear does the same)",
            ))

    expected = _expected_hint(settings.version)
    seen = {h: n for h, n in hints.items() if h != "horizon"}
    # every line reads the payloads of older ones (a queue moved from 8 to 13 keeps its 8.x payloads):
    # only payloads newer than the set version mean --laravel is wrong
    newer = {h: n for h, n in seen.items() if _HINT_ORDER.index(h) > _HINT_ORDER.index(expected)}
    older = {h: n for h, n in seen.items() if _HINT_ORDER.index(h) < _HINT_ORDER.index(expected)}
    if newer:
        out.append(Finding(
            "warn", f"payloads look like Laravel {max(newer, key=lambda h: newer[h])}, newer than the "
            f"{settings.version} laraq is set to", json.dumps(seen),
            "pass --laravel (or LARAQ_LARAVEL_VERSION) with your app's framework version",
        ))
    elif older:
        out.append(Finding(
            "ok", f"payloads dispatched by an older Laravel ({', '.join(sorted(older))}) sit with those of "
            f"{settings.version}: queued before an upgrade or moved here; Laravel {settings.version} runs them",
            json.dumps(seen), "",
        ))
    elif seen:
        out.append(Finding("ok", f"payloads match Laravel {settings.version}"))

    # -- timeouts
    retry_after = queue.retry_after
    if retry_after is not None:
        longest = max(worker_timeout, max_job_timeout)
        if longest >= retry_after:
            out.append(Finding(
                "error", f"timeout {longest}s ≥ retry_after {retry_after}s: a running job can be handed to a "
                "second worker", "reservations expire after retry_after seconds and go back to the queue",
                "set retry_after (REDIS_QUEUE_RETRY_AFTER / config/queue.php) a few seconds longer than the "
                "longest --timeout and job $timeout",
            ))
        else:
            out.append(Finding("ok", f"timeouts ({longest}s) below retry_after ({retry_after}s)"))

    # -- handlers
    handled: list[str] = []  # the loaded app's handler names
    resolve = None
    if app_ref:
        try:
            app = load_app(app_ref)
        except Exception as exc:
            out.append(Finding("error", f"cannot load --app {app_ref!r}", str(exc), "give module:attribute"))
        else:
            handled = list(app.names)
            resolve = app.resolve
            # the worker's own lookup (command class, display name, Class@method, Class)
            missing = sorted(name for name, payload in job_samples.items() if app.resolve(payload) is None)
            if missing:
                out.append(Finding(
                    "info", f"{len(missing)} job class(es) on the queues have no Python handler",
                    ", ".join(missing[:20]),
                    "leave them to PHP workers (laraq leaves a job it has no handler for where it is in the "
                    "list, --unhandled leave) or register @app.handler('Class') for each",
                ))
            elif job_samples:
                out.append(Finding("ok", f"every job class seen has a Python handler ({len(job_samples)} "
                                         "class(es) on the queues)"))
            else:
                out.append(Finding("info", "no job on the queues: no job class was checked against the handlers"))
            out.extend(_job_model_findings(model_notes, app, job_samples, bool(settings.app_key)))
            schema_file = (settings.env or {}).get("LARAQ_SCHEMA")
            try:
                if schema_file:
                    app.load_schema(schema_file)
            except ValueError as exc:
                out.append(Finding("error", f"cannot read LARAQ_SCHEMA {schema_file}", str(exc),
                                   "re-export it: laraq schema --from /path/to/app -o FILE"))
            for problem in app.problems(settings.version):  # what the job schemas say (laraq.bus.schema)
                out.append(Finding("warn", problem, "", "see compat-docs/worker.md, The job model"))

    # -- horizon
    horizon = []
    for raw in client.scan_iter(match="*horizon:*", count=1000):
        horizon.append(raw.decode("utf-8", "replace"))
        if len(horizon) >= 5:
            break
    if horizon or hints.get("horizon"):
        out.append(Finding(
            "warn", "Laravel Horizon is in use",
            "keys such as " + ", ".join(horizon[:3]) if horizon else "payloads carry Horizon's pushedAt/tags",
            "laraq writes Horizon's job, metrics and supervisor records when the app uses Horizon (detected from "
            "config/horizon.php via --env-file, or forced with laraq work --horizon); without them Horizon shows "
            "laraq's jobs as pending. Horizon payloads (id = uuid, escaped unicode) are read fine "
            "(compat-docs/horizon.md)",
        ))
    laraq_queues = queues or [settings.redis_queue]
    shared = shared_queue_warnings(client, settings, queue.connection_name, laraq_queues)
    if horizon or hints.get("horizon"):
        out.extend(_php_waiting_findings(queue, settings, laraq_queues, resolve))
    for warning in shared:
        out.append(Finding("warn", "PHP workers share a queue laraq takes Python jobs from", warning,
                           "give each Python job's PHP class the RunsInPython trait and run laraq on its "
                           "pythonQueue() too (laraq work --queue shared,python), or keep Python jobs on a "
                           "queue only laraq works (compat-docs/config.md, Sharing a queue with PHP workers)"))
    if shared and handled:
        out += handoff_findings(settings, handled)
    return out


def handoff_findings(settings: LaravelSettings, handled: list[str]) -> list[Finding]:
    """The Python jobs' PHP classes without the RunsInPython hand-off, asked of the app when it is here."""
    base = settings.base_path
    on_host = base if base is not None and (base / "artisan").is_file() and (base / "bootstrap" / "app.php").is_file() \
        else None
    check = check_handoff(on_host, handled, env=settings.env)
    text = check.warning()
    if text is None:
        return []
    title = ("the PHP classes of Python jobs could not be checked for RunsInPython" if check.unchecked
             else f"{len(check.missing)} PHP class(es) of Python jobs lack RunsInPython")
    return [Finding("warn", title, text, "use the RunsInPython trait on the PHP class (examples/php/RunsInPython.php, "
                    "compat-docs/worker.md)")]


def _php_waiting_findings(queue: RedisQueue, settings: LaravelSettings, names: list[str],
                          resolve: Any) -> list[Finding]:
    """Jobs only PHP can run on a queue no PHP Horizon supervisor works (:mod:`laraq.horizon.phpwait`):
    counted here with ``--app``, else as live ``laraq work`` processes recorded them."""
    found = []
    if resolve is not None:
        worked = php_worked_queues(queue.client, settings)
        if worked is not None:
            found = [w for w in php_only_waiting(queue, names, resolve, connection=queue.connection_name,
                                                 worked=worked) if w.jobs]
    else:
        with contextlib.suppress(Exception):
            found = [w for w in read_php_waiting(queue.client, queue.prefix)
                     if w.connection == queue.connection_name and w.queue in names]
    return [Finding(
        "warn", f"queue {w.queue!r}: {w.jobs} job(s) only PHP can run wait and no PHP worker works it",
        f"among the first {w.looked_at} jobs, {w.jobs} have no Python handler; no PHP Horizon supervisor is alive "
        "for the queue. horizon:status still says running while a laraq master is alive (it counts every master)",
        "start php artisan horizon (compat-docs/horizon.md, horizon:status and laraq's masters)") for w in found]


def config_findings(settings: LaravelSettings) -> list[Finding]:
    """Where the configuration was read, each value with its source, and what was assumed."""
    out: list[Finding] = []
    facts = setting_facts(settings)
    listing = "\n".join(f"{f['setting']} = {f['value']!r} ({f['source']})" for f in facts)
    if settings.app_config_source:
        out.append(Finding("ok", f"the app's configuration was read: {settings.app_config_source}", listing))
    else:
        out.append(Finding(
            "info", "the app's config/*.php was not read: values come from .env, the environment and defaults",
            listing, "give laraq the app: --env-file inside the app (beside artisan), --app-path, or, where PHP "
            "or the app is not on this host, --app-config FILE from `laraq config --from APP -o FILE`"))
    assumed = [f["setting"] for f in facts if f["assumed"]]
    if assumed:
        out.append(Finding("info", f"{len(assumed)} value(s) assumed, not read: {', '.join(assumed)}",
                           "laraq uses the Laravel default for these",
                           "set them in the app's config (or the LARAQ_* variable) if the default is wrong"))
    for note in settings.config_notes:
        out.append(Finding("warn", "reading the app's configuration", note,
                           "fix the cause, or export the config with laraq config --from APP -o FILE"))
    return out
