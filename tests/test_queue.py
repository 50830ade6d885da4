"""RedisQueue on a real redis-server: key naming per version, every operation's exact effect, round
trips, blocking rules, poison members, authentication (requirepass, ACL), TLS and Redis Cluster."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import RedisServer, dump_redis, require

from laraq.protocol.keys import QueueKeys, has_hash_tag
from laraq.protocol.queue import RedisQueue, ReservedJob
from laraq.protocol.urls import redact_url
from laraq.protocol.versions import LaravelVersion

NOW = 1_700_000_000
PFX = "laravel_database_"
K = PFX + "queues:default"


class Clock:
    """A controllable clock: the queue reads it for every score."""

    def __init__(self, now: float = NOW + 0.25) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingRedis(redis.Redis):
    """A redis-py client that records the name of every command its connections send one at a time
    (through the client or straight on a pooled connection, as a blocking wait does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls: list[str] = []
        calls = self.calls

        class Recording(redis.Connection):
            def send_command(self, *args: Any, **kwargs: Any) -> None:
                calls.append(str(args[0]).upper())
                super().send_command(*args, **kwargs)

        super().__init__(connection_pool=redis.ConnectionPool(*args, connection_class=Recording, **kwargs))


def payload(n: int = 1, attempts: int = 0, **extra: Any) -> bytes:
    doc = {"uuid": f"uuid-{n}", "displayName": "App\\Jobs\\X", "job": "Illuminate\\Queue\\CallQueuedHandler@call",
           "data": {"n": n}, **extra, "id": f"id-{n}", "attempts": attempts}
    return json.dumps(doc, separators=(",", ":")).encode()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rec(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[RecordingRedis]:
    client = RecordingRedis(port=redis_server.port)
    yield client
    client.close()


def make(client: Any, clock: Clock, **kw: Any) -> RedisQueue:
    kw.setdefault("version", "8")
    kw.setdefault("prefix", PFX)
    return RedisQueue(client, clock=clock, **kw)


@pytest.fixture
def q(redis_client: redis.Redis, clock: Clock) -> RedisQueue:
    return make(redis_client, clock)


# -- naming ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("version", "app", "prefix"),
    [("8", "Laravel", "laravel_database_"), ("11", "My App", "my_app_database_"),
     ("12", "Laravel", "laravel-database-"), ("13", "My App", "my-app-database-")],
)
def test_default_prefix_per_version(redis_client: redis.Redis, version: str, app: str, prefix: str) -> None:
    queue = RedisQueue(redis_client, version=version, app_name=app)
    assert queue.prefix == prefix
    assert queue.keys().list == prefix + "queues:default"
    assert RedisQueue(redis_client, version=version, prefix="").keys("x").notify == "queues:x:notify"


def test_key_suffixes() -> None:
    keys = QueueKeys.for_queue("emails", prefix="p_")
    assert (keys.list, keys.delayed, keys.reserved, keys.notify, keys.poison) == (
        "p_queues:emails", "p_queues:emails:delayed", "p_queues:emails:reserved",
        "p_queues:emails:notify", "p_queues:emails:poison",
    )


@pytest.mark.parametrize(
    ("name", "tagged"),
    [("default", True), ("{default}", False), ("a{b}c", False), ("a{}b", True), ("{}{x}", True),
     ("x}{", True), ("{", True), ("{a", True)],
)
def test_cluster_hash_tags_13_5(name: str, tagged: bool) -> None:
    keys = QueueKeys.for_queue(name, prefix="p-", version="13.5", cluster=True)
    assert keys.hash_tagged is tagged
    assert keys.list == ("p-queues:{" + name + "}" if tagged else "p-queues:" + name)
    assert keys.delayed == keys.list + ":delayed"
    # before 13.5, and on non-cluster connections, nothing automatic
    assert QueueKeys.for_queue(name, prefix="p-", version="13.4", cluster=True).list == "p-queues:" + name
    assert QueueKeys.for_queue(name, prefix="p-", version="12", cluster=True).list == "p-queues:" + name
    assert QueueKeys.for_queue(name, prefix="p-", version="13.5", cluster=False).list == "p-queues:" + name


def test_has_hash_tag_follows_redis_rule() -> None:
    assert has_hash_tag("{a}") and has_hash_tag("x{ab}y") and has_hash_tag("{{a}")
    assert not has_hash_tag("{}") and not has_hash_tag("{}{a}") and not has_hash_tag("}{") and not has_hash_tag("ab")


def test_empty_queue_name_means_default(q: RedisQueue) -> None:
    assert q.keys("").list == q.keys(None).list == K
    assert make(q.client, Clock(), default_queue="mail").keys().list == PFX + "queues:mail"


# -- writing --------------------------------------------------------------------------------------

def test_push_raw_and_push(q: RedisQueue, redis_client: redis.Redis) -> None:
    assert q.push_raw(payload(1)) == "id-1"
    assert q.push(payload(2).decode()) == "id-2"
    assert q.push_raw(b"not json") is None
    assert q.push(bytearray(b'{"id":5,"attempts":0}'), "other") == "5"
    assert redis_client.lrange(K, 0, -1) == [payload(1), payload(2), b"not json"]
    assert redis_client.lrange(K + ":notify", 0, -1) == [b"1"] * 3
    assert redis_client.lrange(PFX + "queues:other", 0, -1) == [b'{"id":5,"attempts":0}']


def test_push_accepts_payload_objects(q: RedisQueue, redis_client: redis.Redis) -> None:
    class Built:
        raw = payload(7)

    class AsBytes:
        def __bytes__(self) -> bytes:
            return payload(8)

    assert q.push(Built()) == "id-7"
    assert q.push(AsBytes()) == "id-8"
    with pytest.raises(TypeError):
        q.push(12345)
    assert redis_client.llen(K) == 2


@pytest.mark.parametrize("version", ["8", "12.44", "12.45", "13"])
def test_later_scores(redis_client: redis.Redis, clock: Clock, version: str) -> None:
    q = make(redis_client, clock, version=version)
    when = dt.datetime.fromtimestamp(NOW + 500, tz=dt.UTC)
    assert q.later(30, payload(1)) == "id-1"
    q.later(dt.timedelta(minutes=1), payload(2))
    q.later(when, payload(3))
    q.later(2.9, payload(4))
    assert redis_client.zrange(K + ":delayed", 0, -1, withscores=True) == [
        (payload(4), NOW + 2.0), (payload(1), NOW + 30.0), (payload(2), NOW + 60.0), (payload(3), NOW + 500.0),
    ]
    assert not redis_client.exists(K + ":notify") and not redis_client.exists(K)


@pytest.mark.parametrize(("version", "uses_script"), [("8", False), ("12.44", False), ("12.45", True)])
def test_later_command_per_version(rec: RecordingRedis, clock: Clock, version: str, uses_script: bool) -> None:
    q = make(rec, clock, version=version)
    q.scripts.load()
    rec.calls.clear()
    q.later(5, payload(1))
    assert rec.calls == (["EVALSHA"] if uses_script else ["ZADD"])


@pytest.mark.parametrize(("version", "honours"), [("8", False), ("9.6", False), ("9.7", True), ("13", True)])
def test_bulk_one_transaction(redis_client: redis.Redis, clock: Clock, version: str, honours: bool) -> None:
    q = make(redis_client, clock, version=version)
    redis_client.script_flush()
    redis_client.config_resetstat()
    ids = q.bulk([(payload(1), None), (payload(2), 10), (payload(3).decode(), None)])
    assert ids == ["id-1", "id-2", "id-3"]
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_multi"]["calls"] == 1 and stats["cmdstat_exec"]["calls"] == 1
    assert not any(k.startswith("cmdstat_script") for k in stats)  # no SCRIPT EXISTS/LOAD round trips
    if honours:
        assert redis_client.lrange(K, 0, -1) == [payload(1), payload(3)]
        assert redis_client.zrange(K + ":delayed", 0, -1, withscores=True) == [(payload(2), NOW + 10.0)]
        assert redis_client.llen(K + ":notify") == 2
    else:  # Laravel 8.x–9.6 bulk() pushes everything now
        assert redis_client.lrange(K, 0, -1) == [payload(1), payload(2), payload(3)]
        assert redis_client.llen(K + ":notify") == 3
    assert q.bulk([]) == []


# -- pop ------------------------------------------------------------------------------------------

def test_pop_reserves_exactly(q: RedisQueue, redis_client: redis.Redis) -> None:
    q.push_raw(payload(1))
    q.push_raw(payload(2))
    job = q.pop()
    assert isinstance(job, ReservedJob)
    assert job.queue == "default"
    assert job.body == payload(1)
    assert json.loads(job.reserved) == {**json.loads(payload(1)), "attempts": 1}
    assert redis_client.zrange(K + ":reserved", 0, -1, withscores=True) == [(job.reserved, NOW + 90.0)]
    assert redis_client.lrange(K, 0, -1) == [payload(2)]
    assert redis_client.lrange(K + ":notify", 0, -1) == [b"1"]
    assert q.pop("other") is None


def test_pop_round_trips_match_laravel(rec: RecordingRedis, clock: Clock) -> None:
    q = make(rec, clock)
    q.scripts.load()
    q.push_raw(payload(1))
    rec.calls.clear()
    assert q.pop() is not None
    assert rec.calls == ["EVALSHA"] * 3  # migrate delayed, migrate reserved, pop
    rec.calls.clear()
    assert q.pop() is None
    assert rec.calls == ["EVALSHA"] * 3
    no_expiry = make(rec, clock, retry_after=None)
    rec.calls.clear()
    no_expiry.pop()
    assert rec.calls == ["EVALSHA"] * 2  # no reserved migration when retry_after is null


def test_pop_migrates_due_delayed_and_expired_reserved(q: RedisQueue, redis_client: redis.Redis, clock: Clock) -> None:
    q.push_raw(payload(1))
    q.later(10, payload(2))
    q.later(100, payload(3))
    first = q.pop()
    assert first is not None and first.body == payload(1)
    clock.now += 10  # payload 2 due
    second = q.pop()
    assert second is not None and second.body == payload(2)
    clock.now += 80  # first reservation (NOW+90) expires now; payload 3 due at NOW+100 not yet
    again = q.pop()
    assert again is not None
    assert again.body == first.reserved  # the migrated member is the cjson form
    assert json.loads(again.reserved)["attempts"] == 2
    assert redis_client.zrange(K + ":delayed", 0, -1) == [payload(3)]
    assert {m for m in redis_client.zrange(K + ":reserved", 0, -1)} == {second.reserved, again.reserved}


def test_retry_after_none_never_migrates_reserved(redis_client: redis.Redis, clock: Clock) -> None:
    q = make(redis_client, clock, retry_after=None)
    q.push_raw(payload(1))
    job = q.pop()
    assert job is not None
    # Laravel's availableAt(null) adds nothing: the reservation is scored "now"
    assert redis_client.zscore(K + ":reserved", job.reserved) == float(NOW)
    clock.now += 10_000
    assert q.pop() is None
    assert redis_client.zcard(K + ":reserved") == 1


@pytest.mark.parametrize(("version", "moved"), [("9.22", 5), ("9.23", 2), ("10", 2), ("13", 2)])
def test_migration_batch_size_per_version(redis_client: redis.Redis, clock: Clock, version: str, moved: int) -> None:
    q = make(redis_client, clock, version=version, migration_batch_size=2)
    for i in range(5):
        q.later(-i - 1, payload(i))
    out = q.migrate_expired_jobs(K + ":delayed", K, K + ":notify")
    assert len(out) == moved
    assert redis_client.llen(K) == moved and redis_client.llen(K + ":notify") == moved
    assert redis_client.zcard(K + ":delayed") == 5 - moved
    rest = make(redis_client, clock, version=version).migrate_expired_jobs(K + ":delayed", K)
    assert len(rest) == 5 - moved


def test_poison_members_kept_and_next_job_popped(q: RedisQueue, redis_client: redis.Redis) -> None:
    bad = [b"not json", b'{"uuid":"x","job":"Y"}', b'{"attempts":"many"}']
    for member in bad:
        q.push_raw(member)
    q.push_raw(payload(1, attempts="3"))  # type: ignore[arg-type]
    q.push_raw(payload(2))
    job = q.pop()
    assert job is not None and job.body == payload(1, attempts="3")  # type: ignore[arg-type]
    assert json.loads(job.reserved)["attempts"] == 4
    assert q.poison_size() == 3 and q.poison_members() == bad
    assert redis_client.lrange(K + ":notify", 0, -1) == [b"1"]
    nxt = q.pop()
    assert nxt is not None and nxt.body == payload(2) and q.poison_size() == 3
    assert q.size() == 2  # two reserved; poison is not counted
    assert q.clear() == 2 and q.poison_size() == 3
    assert q.clear_poison() == 3 and q.poison_size() == 0


def test_pop_many(q: RedisQueue, redis_client: redis.Redis, clock: Clock) -> None:
    for i in range(4):
        q.push_raw(payload(i))
    q.later(0, payload(9))
    jobs = q.pop_many(count=10)
    assert [j.body for j in jobs] == [payload(0), payload(1), payload(2), payload(3), payload(9)]
    assert all(j.queue == "default" for j in jobs)
    assert redis_client.zcard(K + ":reserved") == 5 and not redis_client.exists(K + ":notify")


# -- finishing ------------------------------------------------------------------------------------

def test_delete_reserved_uses_exact_member(q: RedisQueue, redis_client: redis.Redis) -> None:
    q.push_raw(payload(1))
    job = q.pop()
    assert job is not None
    wrong = ReservedJob(job.queue, job.body, job.body)
    assert q.delete_reserved(wrong) == 0
    assert q.delete_reserved(job) == 1
    assert dump_redis(redis_client) == {}


def test_release_goes_to_delayed_and_comes_back_with_attempts_2(q: RedisQueue, redis_client: redis.Redis, clock: Clock) -> None:
    q.push_raw(payload(1))
    job = q.pop()
    assert job is not None
    q.release(job, 5)
    assert not redis_client.exists(K + ":reserved")
    assert redis_client.zrange(K + ":delayed", 0, -1, withscores=True) == [(job.reserved, NOW + 5.0)]
    assert q.pop() is None
    clock.now += 5
    again = q.pop()
    assert again is not None and again.body == job.reserved
    assert json.loads(again.reserved)["attempts"] == 2


def test_release_after_expiry_duplicates_like_laravel(q: RedisQueue, redis_client: redis.Redis, clock: Clock) -> None:
    q.push_raw(payload(1))
    job = q.pop()
    assert job is not None
    clock.now += 91
    q.migrate()
    q.release(job)
    assert redis_client.lrange(K, 0, -1) == [job.reserved]
    assert redis_client.zrange(K + ":delayed", 0, -1) == [job.reserved]


# -- inspection -----------------------------------------------------------------------------------

def test_sizes(q: RedisQueue) -> None:
    q.push_raw(payload(1))
    q.push_raw(payload(2))
    q.later(50, payload(3))
    q.pop()
    assert (q.size(), q.pending_size(), q.delayed_size(), q.reserved_size()) == (3, 1, 1, 1)


def test_oldest_pending(q: RedisQueue, clock: Clock) -> None:
    assert q.creation_time_of_oldest_pending_job() is None and q.oldest_pending_age() is None
    q.push_raw(payload(1))  # no createdAt (before 12.11)
    assert q.creation_time_of_oldest_pending_job() is None
    q.clear()
    q.push_raw(payload(2, createdAt=NOW - 30))
    q.push_raw(payload(3, createdAt=NOW - 10))
    assert q.creation_time_of_oldest_pending_job() == NOW - 30
    assert q.oldest_pending_age() == pytest.approx(30.25)
    q.clear()
    q.push_raw(b"garbage")
    assert q.creation_time_of_oldest_pending_job() is None


@pytest.mark.parametrize(("version", "notify_kept"), [("8.4", True), ("8.8", True), ("8.9", False), ("13", False)])
def test_clear_per_version(redis_client: redis.Redis, clock: Clock, version: str, notify_kept: bool) -> None:
    q = make(redis_client, clock, version=version)
    q.push_raw(payload(1))
    q.push_raw(payload(2))
    q.later(9, payload(3))
    q.pop()
    assert q.clear() == 3
    assert set(dump_redis(redis_client)) == ({f"0:{K}:notify"} if notify_kept else set())


# -- blocking -------------------------------------------------------------------------------------

def test_block_for_wakes_up_on_push(redis_server: RedisServer, redis_client: redis.Redis, clock: Clock) -> None:
    q = make(redis_server.client(), clock, block_for=10)
    pusher = make(redis_server.client(), clock)
    timer = threading.Timer(0.2, pusher.push_raw, args=(payload(1),))
    timer.start()
    try:
        job = q.pop()
    finally:
        timer.join()
    assert job is not None and job.body == payload(1)


def test_block_for_times_out(redis_client: redis.Redis, clock: Clock) -> None:
    q = make(redis_client, clock, block_for=0.2)
    assert q.pop() is None


def test_block_for_longer_than_the_socket_timeout(redis_server: RedisServer, clock: Clock) -> None:
    # redis-py 6+ reads with a 5 s socket timeout by default, Laravel's block_for is often 5 or more:
    # the wait must run its course, not end in a TimeoutError (and redis-py's silent retries)
    client = redis.Redis(port=redis_server.port, socket_timeout=0.2)
    q = make(client, clock, block_for=0.7)
    started = time.monotonic()
    assert q.pop() is None
    assert time.monotonic() - started >= 0.6
    client.close()


def test_block_for_consumes_notify_then_retries_once(rec: RecordingRedis, clock: Clock) -> None:
    q = make(rec, clock, block_for=1)
    q.scripts.load()
    rec.rpush(K + ":notify", 1)  # a stale token: BLPOP returns at once, the retry finds nothing
    rec.calls.clear()
    assert q.pop() is None
    assert rec.calls == ["EVALSHA", "EVALSHA", "EVALSHA", "BLPOP", "EVALSHA"]


@pytest.mark.parametrize("version", ["11.27", "13"])
def test_first_queue_rule_11_27(rec: RecordingRedis, clock: Clock, version: str) -> None:
    q = make(rec, clock, version=version, block_for=0.05)
    q.scripts.load()
    rec.calls.clear()
    assert q.pop("high", 0) is None
    assert rec.calls.count("BLPOP") == 1  # the first queue blocks
    rec.calls.clear()
    assert q.pop("low", 1) is None
    assert rec.calls.count("BLPOP") == 0  # later queues never block
    q.push_raw(payload(1), "low")
    assert q.pop("low", 1) is not None and q.secondary_queue_had_job
    rec.calls.clear()
    assert q.pop("high", 0) is None
    assert rec.calls.count("BLPOP") == 0  # a later queue had a job: no blocking this round
    assert not q.secondary_queue_had_job
    rec.calls.clear()
    assert q.pop("high", 0) is None
    assert rec.calls.count("BLPOP") == 1


@pytest.mark.parametrize("version", ["8", "11.26"])
def test_every_pop_may_block_before_11_27(rec: RecordingRedis, clock: Clock, version: str) -> None:
    q = make(rec, clock, version=version, block_for=0.05)
    q.push_raw(payload(1), "low")
    assert q.pop("low", 1) is not None
    rec.calls.clear()
    assert q.pop("high", 0) is None
    assert q.pop("low", 1) is None
    assert rec.calls.count("BLPOP") == 2


# -- connections: URLs, auth, TLS, cluster --------------------------------------------------------

def test_redact_url() -> None:
    assert redact_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("rediss://alice:p%40ss@h:6380/2?ssl_cert_reqs=none") == "rediss://alice:***@h:6380/2?ssl_cert_reqs=none"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_requirepass_url(tmp_path: Path, clock: Clock) -> None:
    server = RedisServer(tmp_path)
    server.client().config_set("requirepass", "s3cr3t")
    try:
        url = f"redis://:s3cr3t@127.0.0.1:{server.port}/2"
        q = make(url, clock)
        assert "s3cr3t" not in q.redacted_url() and q.redacted_url().endswith(f"{server.port}/2")
        q.push_raw(payload(1))
        job = q.pop()
        assert job is not None and job.body == payload(1)
        plain = redis.Redis(port=server.port, password="s3cr3t", db=2)
        assert plain.zcard(K + ":reserved") == 1
        with pytest.raises(redis.AuthenticationError):
            make(f"redis://:wrong@127.0.0.1:{server.port}/2", clock).push_raw(payload(2))
        described = make(plain, clock).redacted_url()
        assert "s3cr3t" not in described and ":***@" in described
    finally:
        server.stop()


def test_acl_user_url(tmp_path: Path, clock: Clock) -> None:
    server = RedisServer(tmp_path)
    try:
        admin = server.client()
        admin.acl_setuser("laraq", enabled=True, passwords=["+pw-1"], keys=["laravel_database_*"],
                          commands=["+@all"])
        q = make(f"redis://laraq:pw-1@127.0.0.1:{server.port}/0", clock)
        assert q.redacted_url() == f"redis://laraq:***@127.0.0.1:{server.port}/0"
        q.push_raw(payload(1))
        assert q.pop() is not None
        assert admin.zcard(K + ":reserved") == 1
        outside = make(f"redis://laraq:pw-1@127.0.0.1:{server.port}/0", clock, prefix="other_")
        with pytest.raises(redis.exceptions.NoPermissionError):
            outside.push_raw(payload(2))
    finally:
        server.stop()


def _make_tls_files(directory: Path) -> tuple[Path, Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("laraq test CA")).issuer_name(name("laraq test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_path, cert_path, key_path = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_path, cert_path, key_path


def test_tls_url(tmp_path: Path, clock: Clock) -> None:
    import socket

    ca, cert, key = _make_tls_files(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tls_port = s.getsockname()[1]
    try:
        server = RedisServer(tmp_path, "--tls-port", str(tls_port), "--tls-cert-file", str(cert),
                             "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
                             "--tls-auth-clients", "no")
    except RuntimeError:
        require(False, "redis-server does not start with --tls-port (built without TLS support?)")
        raise
    server.client().config_set("requirepass", "pw")
    try:
        url = f"rediss://:pw@127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}"
        q = make(url, clock)
        assert q.redacted_url().startswith("rediss://:***@")
        q.push_raw(payload(1))
        job = q.pop()
        assert job is not None and job.body == payload(1)
        assert make(q.client, clock).redacted_url().startswith("rediss://")
        with pytest.raises(redis.ConnectionError):  # the certificate is checked
            make(f"rediss://:pw@127.0.0.1:{tls_port}/0", clock).push_raw(payload(2))
    finally:
        server.stop()


def _start_cluster(tmp_path: Path) -> RedisServer:
    server = RedisServer(tmp_path, "--cluster-enabled", "yes", "--cluster-config-file",
                         str(tmp_path / "nodes.conf"))
    admin = server.client()
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    deadline = time.monotonic() + 10
    while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
        if time.monotonic() > deadline:
            server.stop()
            require(False, "single-node cluster did not become ready")
        time.sleep(0.05)
    return server


def test_cluster_hash_tags_on_a_real_cluster(tmp_path: Path, clock: Clock) -> None:
    server = _start_cluster(tmp_path)
    try:
        client = redis.RedisCluster(host="127.0.0.1", port=server.port)
        q = make(client, clock, version="13.5", cluster=True, prefix="laravel-database-")
        q.push_raw(payload(1))
        q.later(0, payload(2))
        job = q.pop()
        assert job is not None and job.body == payload(1)
        q.release(job, 0)
        q.bulk([(payload(3), None), (payload(4), 5)])
        assert q.size() == 4
        keys = sorted(k.decode() for k in client.keys("*"))
        assert all("queues:{default}" in k for k in keys), keys
        assert q.clear() == 4
        old = make(client, clock, version="13.4", cluster=True, prefix="laravel-database-", default_queue="{mail}")
        old.push_raw(payload(5))
        assert old.pop() is not None
        assert client.exists("laravel-database-queues:{mail}:reserved")
        # URL construction of a cluster client
        by_url = make(f"redis://127.0.0.1:{server.port}/0", clock, version="13.5", cluster=True)
        assert isinstance(by_url.client, redis.RedisCluster)
        by_url.push_raw(payload(6))
        assert by_url.pending_size() == 1
        client.close()
    finally:
        server.stop()


def test_version_objects_accepted(redis_client: redis.Redis) -> None:
    q = RedisQueue(redis_client, version=LaravelVersion.parse("9.23"))
    assert q.version.migrate_has_limit
