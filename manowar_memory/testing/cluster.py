"""Local MongoDB clusters and engine processes for multi-process tests and benchmarks.

:class:`ReplicaSet` runs a replica set of real ``mongod`` processes on free local ports (the
binary ``scripts/services.sh`` installs: ``$MANOWAR_SERVICES_ROOT/mongo/bin/mongod``, or
``MANOWAR_MONGOD``), each with a small WiredTiger cache, and can SIGKILL and restart a member.
:class:`EngineProcess` runs one :class:`~manowar_memory.MemoryEngine` in a child Python
process driven by JSON lines over its stdin/stdout, so several engines (each with its own
in-process vector cache and query cache) share one store as separate deployments would.

Used by ``tests/cluster`` and ``benchmarks/cluster.py``; not imported by the library.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .. import MemoryConfig, MemoryEngine, Scope
from ..errors import ConfigurationError, ManowarError

__all__ = ["EngineProcess", "RemoteError", "ReplicaSet", "bench_turns", "find_mongo_binary", "free_port"]

#: Replica-set settings of :class:`ReplicaSet`: a dead primary is noticed after 2 s (instead
#: of 10 s), heartbeats every 500 ms, so a test's failover finishes in a few seconds.
FAST_ELECTION_SETTINGS = {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500}


def services_root() -> Path:
    """Where ``scripts/services.sh`` installs binaries (``MANOWAR_SERVICES_ROOT``)."""
    return Path(os.environ.get("MANOWAR_SERVICES_ROOT") or "~/.cache/manowar-services").expanduser()


def find_mongo_binary(name: str = "mongod") -> Path:
    """The path of ``mongod`` (or ``mongos``): ``MANOWAR_MONGOD`` / ``MANOWAR_MONGOS``, else the
    one ``scripts/services.sh`` installed. Raises :class:`ConfigurationError` when it is missing."""
    env = os.environ.get(f"MANOWAR_{name.upper()}")
    path = Path(env) if env else services_root() / "mongo" / "bin" / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ConfigurationError(
            f"no {name} binary at {path}; run `bash scripts/services.sh start mongo` or set MANOWAR_{name.upper()}"
        )
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class ReplicaSet:
    """A replica set of ``members`` local ``mongod`` processes (all electable, same priority).

    >>> with ReplicaSet(members=3) as rs:          # doctest: +SKIP
    ...     MongoStore(rs.uri, database="db")

    ``cache_gb`` is each member's WiredTiger cache (keep it small: several mongods share the
    machine). ``settings`` are the replica-set config settings (default: fast elections).
    Data and logs live under ``root`` (a temporary directory removed on :meth:`stop` when not given).
    """

    def __init__(self, members: int = 3, *, name: str = "rsc", root: str | Path | None = None,
                 cache_gb: float = 0.25, settings: dict[str, Any] | None = None,
                 mongod: str | Path | None = None) -> None:
        if members < 1:
            raise ConfigurationError("a replica set needs at least one member")
        self.mongod = Path(mongod) if mongod else find_mongo_binary("mongod")
        self.name = name
        self._own_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix=f"manowar-{name}-"))
        self.cache_gb = cache_gb
        self.settings = dict(FAST_ELECTION_SETTINGS if settings is None else settings)
        self.ports = [free_port() for _ in range(members)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members

    # -- addresses --
    @property
    def hosts(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    @property
    def uri(self) -> str:
        """The replica-set URI (every member as a seed)."""
        return f"mongodb://{','.join(self.hosts)}/?replicaSet={self.name}"

    def member_uri(self, index: int) -> str:
        """A direct connection to one member."""
        return f"mongodb://{self.hosts[index]}/?directConnection=true"

    # -- lifecycle --
    def _spawn(self, index: int) -> None:
        port = self.ports[index]
        data = self.root / f"m{index}"
        data.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "LD_LIBRARY_PATH": str(self.mongod.parent.parent / "lib")}
        log = open(self.root / f"m{index}.out", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.procs[index] = subprocess.Popen(
                [str(self.mongod), "--bind_ip", "127.0.0.1", "--port", str(port), "--dbpath", str(data),
                 "--replSet", self.name, "--wiredTigerCacheSizeGB", str(self.cache_gb),
                 "--setParameter", "ttlMonitorSleepSecs=1", "--syncdelay", "5",
                 "--logpath", str(self.root / f"m{index}.log"), "--logappend"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        finally:
            log.close()

    def _wait_port(self, index: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        proc = self.procs[index]
        while not _port_open(self.ports[index]):
            if proc is not None and proc.poll() is not None:
                raise ConfigurationError(f"mongod member {index} exited ({proc.returncode}); see {self.root}/m{index}.log")
            if time.monotonic() > deadline:
                raise ConfigurationError(f"mongod member {index} did not listen on :{self.ports[index]} in {timeout:.0f} s")
            time.sleep(0.1)

    def start(self, timeout: float = 90.0) -> ReplicaSet:
        """Start every member, initiate the set, wait for a primary. Returns self."""
        import pymongo

        atexit.register(self.stop)  # no mongod outlives the process that started it
        for i in range(len(self.ports)):
            self._spawn(i)
        try:
            for i in range(len(self.ports)):
                self._wait_port(i)
            client: Any = pymongo.MongoClient(self.member_uri(0), serverSelectionTimeoutMS=10_000)
            try:
                client.admin.command("replSetInitiate", {
                    "_id": self.name, "settings": self.settings,
                    "members": [{"_id": i, "host": h} for i, h in enumerate(self.hosts)],
                })
            finally:
                client.close()
            self.wait_primary(timeout)
            self.wait_secondaries(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _hello(self, index: int) -> dict[str, Any] | None:
        import pymongo

        client: Any = pymongo.MongoClient(self.member_uri(index), serverSelectionTimeoutMS=1000,
                                          connectTimeoutMS=1000)
        try:
            return dict(client.admin.command("hello"))
        except pymongo.errors.PyMongoError:
            return None
        finally:
            client.close()

    def primary(self) -> int | None:
        """The index of the current writable primary, or None."""
        for i, proc in enumerate(self.procs):
            if proc is not None and proc.poll() is None:
                hello = self._hello(i)
                if hello and hello.get("isWritablePrimary"):
                    return i
        return None

    def wait_primary(self, timeout: float = 60.0) -> int:
        """Wait until a member is primary; return its index."""
        deadline = time.monotonic() + timeout
        while True:
            index = self.primary()
            if index is not None:
                return index
            if time.monotonic() > deadline:
                raise ConfigurationError(f"replica set {self.name} had no primary after {timeout:.0f} s")
            time.sleep(0.2)

    def wait_secondaries(self, timeout: float = 60.0) -> None:
        """Wait until every running member is PRIMARY or SECONDARY."""
        deadline = time.monotonic() + timeout
        while True:
            states = [self._hello(i) for i, p in enumerate(self.procs) if p is not None and p.poll() is None]
            if all(h and (h.get("isWritablePrimary") or h.get("secondary")) for h in states):
                return
            if time.monotonic() > deadline:
                raise ConfigurationError(f"replica set {self.name}: members not all PRIMARY/SECONDARY after {timeout:.0f} s")
            time.sleep(0.2)

    def kill(self, index: int) -> None:
        """SIGKILL one member (no shutdown: as a crashed machine)."""
        proc = self.procs[index]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)

    def restart(self, index: int) -> None:
        """Start a killed member again on its port and data directory (it rejoins and catches up)."""
        self.kill(index)
        self._spawn(index)
        self._wait_port(index)

    def stop(self) -> None:
        """Stop every member and remove a temporary root. Members of a temporary root are
        SIGKILLed (their data is thrown away; a clean shutdown of a primary waits ~10 s for a
        secondary to catch up); with a given root they get SIGTERM, then SIGKILL after 20 s."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                if self._own_root:
                    proc.kill()
                else:
                    proc.terminate()
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            self.procs[i] = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------- engine processes


class EngineProcess:
    """One :class:`~manowar_memory.MemoryEngine` on a MongoDB store in a child process.

    ``store_uri``/``database``: the store (a :class:`~manowar_memory.stores.mongo.MongoStore`
    with its defaults: in-process vector cache on unless ``vector_cache=False``).
    ``store_options``: more MongoStore arguments (client options such as ``serverSelectionTimeoutMS``).
    ``redis_url``/``redis_prefix``: a shared :class:`~manowar_memory.cache.redis.RedisCache`
    with the layer query cache on. :meth:`call` sends one operation and returns its answer;
    :meth:`send` / :meth:`receive` split it so several processes work at once.
    A library error in the child comes back as :class:`RemoteError` naming its class.
    """

    def __init__(self, store_uri: str, database: str, *, redis_url: str | None = None,
                 redis_prefix: str | None = None, vector_cache: bool = True, embedder: str = "fake",
                 store_options: dict[str, Any] | None = None) -> None:
        spec = {"store_uri": store_uri, "database": database, "redis_url": redis_url, "redis_prefix": redis_prefix,
                "vector_cache": vector_cache, "embedder": embedder, "store_options": store_options or {}}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "manowar_memory.testing.cluster", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self._lock = threading.Lock()
        ready = self.receive()
        if ready.get("ready") is not True:
            raise ConfigurationError(f"engine process did not start: {ready}")

    def send(self, op: str, **kwargs: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise ConfigurationError(f"engine process exited ({self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RemoteError(answer["error"]["type"], answer["error"]["message"], answer["error"].get("retryable"))
        return answer

    def call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.send(op, **kwargs)
            return self.receive()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)


class RemoteError(ManowarError):
    """An error raised inside an :class:`EngineProcess`: ``type`` is its class name and
    ``retryable`` its ``retryable`` attribute (None when it has none)."""

    def __init__(self, type_name: str, message: str, retryable: bool | None = None) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type = type_name
        self.retryable = retryable


def _error_payload(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "retryable": getattr(exc, "retryable", None),
            "library": isinstance(exc, ManowarError)}


def _churn(engine: Any, req: dict[str, Any]) -> dict[str, Any]:
    """For ``seconds``: rounds of remember, ingest (keyed) and post_turn (own turn id), each
    retried while it raises a retryable library error (post_turn only after checking that its
    turn is not stored yet), then a pre_turn read. Returns what was acknowledged, every error
    seen and when each successful read ended (epoch seconds)."""
    tag = req["tag"]
    scope = Scope(agent_wallet=req["agent"], user_address=f"user-{tag}", thread_id=f"thread-{tag}")
    acked: dict[str, list[Any]] = {"remember": [], "ingest": [], "post_turn": []}
    errors: list[dict[str, Any]] = []
    reads: list[float] = []
    delay = float(req.get("delay", 0.0))
    until = time.time() + float(req["seconds"])

    def attempt(fn: Any, before_retry: Any = None) -> Any:
        for tries in range(300):
            try:
                if tries and before_retry is not None:
                    done = before_retry()
                    if done is not None:
                        return done
                return fn()
            except Exception as exc:
                payload = {**_error_payload(exc), "at": time.time()}
                errors.append(payload)
                if not (payload["library"] and payload["retryable"]):
                    raise
                time.sleep(0.1)
        raise ConfigurationError("gave up after 300 retries")

    def turn_stored(turn: str) -> Any:
        for message in engine.thread_messages(scope):
            if message.content == f"{turn} asks":
                return "already-stored"
        return None

    i = 0
    while time.time() < until:
        text = f"{tag} fact number {i}: the user keeps {i} notebooks"
        res = attempt(lambda text=text: engine.remember(scope, text))
        acked["remember"].append([res.id, res.fact_hash])
        key = f"{tag}-doc-{i}"
        ids = attempt(lambda i=i, key=key: engine.ingest(scope, [{"content": f"{tag} document {i}", "key": key}]))
        acked["ingest"].append([ids[0], key])
        turn = f"{tag}-turn-{i}"
        res = attempt(lambda turn=turn: engine.post_turn(
            scope, [{"role": "user", "content": f"{turn} asks"}, {"role": "assistant", "content": "ok"}],
            turn_id=turn, extract_facts=False), before_retry=lambda turn=turn: turn_stored(turn))
        acked["post_turn"].append([getattr(res, "vector_id", None), turn])
        try:
            engine.pre_turn(f"notebooks {i}", scope)
            reads.append(time.time())
        except Exception as exc:  # noqa: BLE001
            errors.append({**_error_payload(exc), "at": time.time(), "read": True})
        i += 1
        if delay:
            time.sleep(delay)
    return {"acked": acked, "errors": errors, "reads": reads}


def _serve(spec: dict[str, Any]) -> None:  # pragma: no cover - runs in the child process
    from ..stores.mongo import MongoStore

    options = dict(spec.get("store_options") or {})
    if not spec.get("vector_cache", True):
        options["vector_cache_bytes"] = 0
    store = MongoStore(spec["store_uri"], database=spec["database"], **options)
    cache = None
    if spec.get("redis_url"):
        from ..cache.redis import RedisCache

        cache = RedisCache(spec["redis_url"], prefix=spec.get("redis_prefix") or "manowar:")
    engine = MemoryEngine(store=store, embedder=spec.get("embedder", "fake"), cache=cache,
                          config=MemoryConfig(query_cache=cache is not None))
    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        op = req.pop("op")
        if op == "exit":
            break
        try:
            scope = Scope.coerce(req.get("scope") or {"agent_wallet": "none"})
            if op == "remember":
                answer: dict[str, Any] = {"id": engine.remember(scope, req["text"]).id}
            elif op == "ingest":
                answer = {"ids": engine.ingest(scope, req["items"])}
            elif op == "post_turn":
                res = engine.post_turn(scope, req["messages"], turn_id=req.get("turn_id"), extract_facts=False)
                answer = {"vector_id": res.vector_id}
            elif op == "search":
                hits, notes = engine.search(req["query"], scope, k=int(req.get("k", 10)))
                answer = {"ids": [h.id for h in hits], "notes": notes}
            elif op == "pre_turn":
                started = time.perf_counter()
                pre = engine.pre_turn(req["query"], scope, max_items=int(req.get("max_items", 6)),
                                      budget_chars=int(req.get("budget_chars", 900)))
                lanes = {k: v for k, v in pre.lanes.items() if not k.startswith("_")}
                answer = {"ids": [it.id for it in pre.items], "ms": (time.perf_counter() - started) * 1000,
                          "notes": pre.degradations, "cache_hit": bool(pre.lanes.get("_cache", {}).get("hit")),
                          "vector_methods": sorted({str(v.get("vector_method")) for v in lanes.values()
                                                    if v.get("vector_method")}),
                          "vector_hits": sorted({str(h[0]) for v in lanes.values()
                                                 for h in (v.get("hits") or {}).get("vector", [])})}
            elif op == "delete":
                answer = {"deleted": engine.delete_item(scope, req["id"], hard=bool(req.get("hard")))}
            elif op == "churn":
                answer = _churn(engine, req)
            elif op == "bench":
                answer = bench_turns(engine, agent=req["agent"], tag=req["tag"], n=int(req["n"]),
                                     start_at=float(req.get("start_at", 0)))
            else:
                raise ConfigurationError(f"unknown operation {op!r}")
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            answer = {"error": _error_payload(exc)}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    engine.close()


def bench_turns(engine: Any, *, agent: str, tag: str, n: int, start_at: float = 0.0) -> dict[str, Any]:
    """``n`` post_turns then ``n`` pre_turns in one scope (user and thread named by ``tag``),
    starting at the wall-clock time ``start_at`` (so several processes overlap). Returns each
    call's latency in ms (``post_ms``, ``pre_ms``), each phase's [start, end] epoch seconds and
    the pre_turns' ``timings_ms`` per stage (``pre_stage_ms``)."""
    scope = Scope(agent_wallet=agent, user_address=f"user-{tag}", thread_id=f"thread-{tag}")
    time.sleep(max(0.0, start_at - time.time()))
    post: list[float] = []
    post_started = time.time()
    for i in range(n):
        t = time.perf_counter()
        engine.post_turn(scope, [{"role": "user", "content": f"I moved to city {i % 17} and like dish {i % 5}"},
                                 {"role": "assistant", "content": "noted"}], extract_facts=False)
        post.append((time.perf_counter() - t) * 1000)
    pre: list[float] = []
    stages: dict[str, list[float]] = {}
    pre_started = time.time()
    for i in range(n):  # every query is new: no query-cache hits, as with real conversations
        t = time.perf_counter()
        result = engine.pre_turn(f"where does the user live now, city {i % 17}? (turn {i} of {tag})", scope)
        pre.append((time.perf_counter() - t) * 1000)
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    return {"post_ms": post, "pre_ms": pre, "post_window": [post_started, pre_started],
            "pre_window": [pre_started, time.time()], "pre_stage_ms": stages}


if __name__ == "__main__":  # pragma: no cover
    _serve(json.loads(sys.argv[1]))
