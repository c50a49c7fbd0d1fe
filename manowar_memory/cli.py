"""The ``manowar`` command: demo, remember, recall, ingest, reembed, stats, worker, serve, mcp, api-key."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import click

from ._version import __version__
from .cli_schedules import schedules
from .engine import NO_EMBEDDER, IngestItem, MemoryEngine, open_store
from .errors import InvalidInputError, ManowarError
from .notes.cli import notes as notes_cli
from .scope import Scope
from .server import mcp as mcp_server  # a module: tests replace run_stdio on it
from .server.auth import ApiKeys, hash_key, new_key
from .server.client_config import CLIENTS, client_config

__all__ = ["main"]

_EMBEDDER_HELP = ("Embedder: 'auto' ($MANOWAR_EMBEDDER, else the best one installed: 'onnx', then 'local'; "
                  "keyword-only with a warning when none is), 'onnx', 'onnx-int8', 'local' (MiniLM, offline), "
                  "'voyage[:model]', 'fake', or 'none' for keyword-only.")


def _engine(store: str | None, embedder: str) -> MemoryEngine:
    return MemoryEngine(store=store, embedder=None if embedder == "none" else embedder)


def _scope(agent: str, user: str | None, thread: str | None) -> Scope:
    return Scope(agent_wallet=agent, user_address=user, thread_id=thread)


def _versus_raw(packed: int, raw: int) -> str:
    """The packed prompt's length against the raw texts it holds, as the true difference: the
    wrapper and the layer headers can make a prompt of a few short items longer than they are."""
    if packed > raw:
        return f"raw {raw}, packed is {packed - raw} chars longer: the wrapper and headers"
    return f"raw {raw}, saved {raw - packed}"


def _print_result(result: Any, explain: bool) -> None:
    click.echo(result.prompt or "(no memory matched)")
    u = result.context_usage
    totals = {k: v for k, v in result.totals.items() if v}
    click.echo(
        click.style(
            f"  {u.items} items, {u.characters}/{u.budget_characters} chars "
            f"({_versus_raw(u.characters, u.raw_characters)}); "
            f"totals {totals}; "
            f"{result.timings_ms.get('total', 0):.1f} ms",
            dim=True,
        )
    )
    for note in result.degradations:
        click.echo(click.style(f"  note: {note}", fg="yellow"))
    if explain and result.decisions:
        for d in result.decisions:
            click.echo(click.style(f"    {d.status:<15} {d.layer:<8} {d.score:.3f} {d.characters:>4}c  {d.reason}", dim=True))


@click.group()
@click.version_option(__version__, package_name="manowar-memory")
def cli() -> None:
    """Layered long-term memory for LLM agents."""


#: the demo lists at most this many extracted facts (its conversation yields far fewer)
_DEMO_FACTS_SHOWN = 200


@cli.command()
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
@click.option("--store", default="sqlite:///:memory:", show_default=True, help="Store URL.")
@click.option("--budget", default=900, show_default=True, type=click.IntRange(min=40), help="Character budget.")
@click.option("--explain", is_flag=True, help="Show the packer's decision for every candidate.")
def demo(embedder: str, store: str, budget: int, explain: bool) -> None:
    """Build a memory from a sample multi-session conversation and recall from it."""
    data = json.loads(resources.files("manowar_memory").joinpath("data/sample_conversation.json").read_text())
    click.echo(click.style(f"manowar demo: embedder={embedder}, store={store}", bold=True))
    engine = _engine(store, embedder)
    turns = sum(len(s["turns"]) for s in data["sessions"])
    from tqdm import tqdm

    with tqdm(total=turns, desc="post_turn", unit="turn") as bar:
        for session in data["sessions"]:
            scope = _scope(data["agent"], data["user"], session["thread"])
            start = int(datetime.fromisoformat(session["date"].replace("Z", "+00:00")).timestamp() * 1000)
            for i, (user, assistant) in enumerate(session["turns"]):
                engine.post_turn(
                    scope,
                    [
                        {"role": "user", "content": user, "timestamp": start + i * 60_000},
                        {"role": "assistant", "content": assistant, "timestamp": start + i * 60_000 + 1},
                    ],
                )
                bar.update(1)
    flushed = engine.flush()
    scope = _scope(data["agent"], data["user"], "today")
    facts = engine.scoped(scope).list(sources=("fact",), limit=_DEMO_FACTS_SHOWN)
    click.echo(click.style(f"\nFacts extracted ({flushed.facts_indexed} new):", bold=True))
    for f in reversed(facts):
        click.echo(f"  [{f.metadata.get('factType')}] {f.content}")
    for question in data["questions"]:
        click.echo(click.style(f"\n? {question}", bold=True, fg="cyan"))
        _print_result(engine.pre_turn(question, scope, budget_chars=budget, explain=explain), explain)
    engine.close()


@cli.command()
@click.argument("content")
@click.option("--agent", required=True, help="Agent id (agentWallet).")
@click.option("--user", default=None, help="User id.")
@click.option("--type", "fact_type", default=None,
              type=click.Choice(["preference", "identity", "context", "skill", "relationship", "event"]))
@click.option("--confidence", type=click.FloatRange(0, 1), default=None)
@click.option("--ttl", type=click.FloatRange(0, min_open=True), default=None,
              help="Time to live in seconds: the fact is no longer recalled after it (default: none, or the config's).")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
def remember(content: str, agent: str, user: str | None, fact_type: str | None, confidence: float | None,
             ttl: float | None, store: str | None, embedder: str) -> None:
    """Store an explicit fact."""
    with _engine(store, embedder) as engine:
        result = engine.remember(_scope(agent, user, None), content, fact_type=fact_type, confidence=confidence,
                                 ttl=ttl)
    click.echo(f"{'reinforced' if result.deduplicated else 'stored'} {result.id} ({result.fact_type})")


@cli.command()
@click.argument("query")
@click.option("--agent", required=True, help="Agent id (agentWallet).")
@click.option("--user", default=None, help="User id.")
@click.option("--thread", default=None, help="Thread id (narrows working and scene layers).")
@click.option("--layers", default=None, help="Comma-separated layers (default: all six).")
@click.option("--budget", default=900, show_default=True, type=click.IntRange(min=40))
@click.option("--max-items", default=6, show_default=True, type=click.IntRange(min=1))
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
@click.option("--explain", is_flag=True, help="Show the packer's decision for every candidate.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
def recall(query: str, agent: str, user: str | None, thread: str | None, layers: str | None, budget: int,
           max_items: int, store: str | None, embedder: str, explain: bool, as_json: bool) -> None:
    """Run pre_turn from the shell and print the packed context."""
    with _engine(store, embedder) as engine:
        result = engine.pre_turn(
            query, _scope(agent, user, thread), [name.strip() for name in layers.split(",")] if layers else None,
            budget_chars=budget, max_items=max_items, explain=explain,
        )
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        _print_result(result, explain)


@cli.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--agent", required=True, help="Agent id (agentWallet).")
@click.option("--user", default=None, help="User id.")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
def ingest(path: Path, agent: str, user: str | None, store: str | None, embedder: str) -> None:
    """Load memories from a JSON-lines file (one {"content": ...} object or string per line).

    A line's other fields are those of IngestItem: key (or id), source, created_at, thread_id,
    metadata, context, ttl, expires_at. Each item is stored once per scope: its key is the
    line's own "key" (or "id"), else one made from what it holds (its content, source, thread,
    creation time, context and metadata), so the same lines ingested again, from this file or
    a copy of it, store nothing new. Running the command again (after an interruption or an
    embedder failure) stores only what is missing."""
    items = [_ingest_line(item, n, path) for n, item in _json_lines(path)]
    with _engine(store, embedder) as engine:
        report = engine.ingest_report(_scope(agent, user, None), items, progress=True)
    new = report.inserted
    click.echo(f"ingested {len(report.ids)} memories ({new} new, {len(report.ids) - new} already stored)")


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """The JSON value of every non-blank line of ``path`` with its 1-based line number."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"line {n} of {path} is not JSON: {exc}", param_hint="PATH") from exc
    return out


#: fields other tools name the text by, and what to write instead
_TEXT_FIELDS = ("text", "page_content", "pageContent", "document", "memory")


def _ingest_line(item: Any, n: int, path: Path) -> dict[str, Any]:
    """One line as an ingest item, or an :class:`InvalidInputError` naming the line, the field
    that is wrong and what to write instead."""
    from pydantic import ValidationError

    where = f"line {n} of {path}"
    if isinstance(item, str):
        return {"content": item}
    if not isinstance(item, dict):
        raise InvalidInputError(f'{where} is a JSON {type(item).__name__}: write a string or an object such as '
                                '{"content": "..."}')
    if "content" not in item:
        named = [f for f in _TEXT_FIELDS if f in item]
        if named:
            raise InvalidInputError(f'{where} has "{named[0]}" but no "content": the text of a memory goes in '
                                    f'"content", e.g. {{"content": {json.dumps(item[named[0]])[:60]}}}')
        raise InvalidInputError(f'{where} has no "content" (the memory\'s text): write {{"content": "..."}}')
    allowed = {*IngestItem.model_fields, "id"}
    unknown = sorted(str(k) for k in item if k not in allowed)
    if unknown:
        raise InvalidInputError(f"{where} has unknown field(s) {unknown}: the fields are {sorted(allowed)} "
                                '(put anything else under "metadata")')
    if isinstance(item["content"], str) and not item["content"].strip():
        raise InvalidInputError(f'{where} has an empty "content": give the memory\'s text, or remove the line')
    try:
        IngestItem.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "the line"
        raise InvalidInputError(f'{where}: field "{field}" is invalid ({first.get("msg")}); see `manowar ingest '
                                "--help` for the fields and their types") from None
    return item


@cli.command()
@click.option("--agent", default=None, help="Only this agent's rows (default: every row of the store).")
@click.option("--user", default=None, help="Only this user's rows of the agent (needs --agent).")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1, max=10_000),
              help="Rows embedded and written at a time.")
@click.option("--dry-run", is_flag=True, help="Count the rows to embed; write nothing.")
def reembed(agent: str | None, user: str | None, store: str | None, embedder: str, batch_size: int,
            dry_run: bool) -> None:
    """Embed the rows that have no vector of the embedder's model: rows written keyword-only
    (--embedder none, or before an embedder was installed) or by another model.

    Resumable: rows are written a batch at a time, and running the command again skips the
    rows this model has embedded."""
    if user is not None and agent is None:
        raise click.UsageError("--user needs --agent: a user's rows are those of one agent")
    if embedder == "none":
        raise click.BadParameter("reembed embeds: name an embedder (or leave --embedder out for the best one "
                                 "installed)", param_hint="--embedder")
    with _engine(store, embedder) as engine:
        if engine.embedder is None:
            raise click.ClickException(f"nothing to embed with: {engine.keyword_only_note}")
        owner = _scope(agent, user, None) if user is not None and agent is not None else None
        report = engine.reembed(agent, owner=owner, batch_size=batch_size, progress=True, dry_run=dry_run)
    verb = "would embed" if dry_run else "embedded"
    click.echo(f"{verb} {report.embedded} rows with {report.model_id} ({report.already_embedded} already embedded, "
               f"{report.skipped_inactive} inactive skipped, {report.scanned} scanned)")


@cli.command()
@click.option("--agent", default=None, help="Only this agent.")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
def stats(agent: str | None, store: str | None) -> None:
    """Counts and ages of what is stored."""
    with _engine(store, "none") as engine:
        click.echo(json.dumps(engine.stats(agent), indent=2))


@cli.command()
@click.option("--address", envvar="TEMPORAL_ADDRESS", default="127.0.0.1:7233", show_default=True,
              help="Temporal frontend host:port (env TEMPORAL_ADDRESS).")
@click.option("--namespace", envvar="TEMPORAL_NAMESPACE", default="default", show_default=True,
              help="Temporal namespace (env TEMPORAL_NAMESPACE).")
@click.option("--task-queue", default=None, help="Task queue (default: manowar.memory.activities).")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--heartbeat-every", default=30.0, show_default=True, type=click.FloatRange(min=0.05),
              help="Seconds between activity heartbeats (capped at a third of the heartbeat timeout).")
@click.option("--graceful-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds running activities get to finish after SIGINT/SIGTERM.")
@click.option("--sticky-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a workflow task waits for this worker before any worker may take it (after a crash).")
@click.option("--schedules", is_flag=True,
              help="Create the maintenance schedules at startup (unless MEMORY_AUTO_SCHEDULES=false).")
@click.option("--redis", "redis_url", envvar="MANOWAR_REDIS_URL", default=None,
              help="The Redis the engines cache queries in (env MANOWAR_REDIS_URL): jobs then invalidate "
              "exactly the cached queries of the scopes they change. Without it cached reads stay stale "
              "until their TTL.")
def worker(address: str, namespace: str, task_queue: str | None, store: str | None, heartbeat_every: float,
           graceful_timeout: float, sticky_timeout: float, schedules: bool, redis_url: str | None) -> None:
    """Run a Temporal worker for the maintenance jobs until SIGINT or SIGTERM."""
    import asyncio
    from datetime import timedelta

    try:
        from .jobs.temporal import DEFAULT_TASK_QUEUE, run_worker
    except ImportError as exc:
        raise click.ClickException(f'the worker needs temporalio: pip install "manowar-memory[temporal]" ({exc})') from exc
    queue = task_queue or DEFAULT_TASK_QUEUE
    backend = open_store(store)
    target = _worker_target(backend, redis_url)

    def ready() -> None:
        click.echo(f"worker ready: {address} namespace={namespace} task_queue={queue} store={backend.name}"
                   + (" query-cache=redis" if redis_url else ""))

    try:
        asyncio.run(run_worker(target, address=address, namespace=namespace, task_queue=queue,
                               heartbeat_every=heartbeat_every, graceful_shutdown=graceful_timeout, on_ready=ready,
                               sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout),
                               schedules=schedules))
    finally:
        if target is not backend:
            target.close()
        backend.close()
    click.echo("worker stopped")


def _worker_target(store: Any, redis_url: str | None) -> Any:
    """What the worker's activities run on: the store, or with ``redis_url`` an engine over it
    whose Redis query cache the jobs invalidate (no embedder: the jobs embed nothing)."""
    if not redis_url:
        return store
    from .cache.redis import RedisCache

    return MemoryEngine(store=store, embedder=None, cache=RedisCache(redis_url))



def _server_engine(store: str | None, embedder: str, redis_url: str | None) -> MemoryEngine:
    cache = None
    if redis_url:
        from .cache.redis import RedisCache

        cache = RedisCache(redis_url)
    return MemoryEngine(store=store, embedder=None if embedder == "none" else embedder, cache=cache)


def _announce_embedder(engine: MemoryEngine) -> None:
    """Say on stderr which embedder a server runs with, or why it is keyword-only."""
    if engine.embedder is not None:
        click.echo(f"embedder: {engine.embedder.model_id} (loading)", err=True)
    elif engine.keyword_only_note == NO_EMBEDDER:
        click.echo("embedder: none (keyword-only, as chosen)", err=True)
    else:
        click.echo(click.style(f"warning: {engine.keyword_only_note}", fg="yellow"), err=True)


def _server_keys(keys_file: Path | None) -> ApiKeys:
    return ApiKeys.load(keys_file)


_KEYS_HELP = "JSON file of API keys (sha256 hash, agentWallet, optional userAddress); default $MANOWAR_API_KEYS."


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
@click.option("--redis", "redis_url", envvar="MANOWAR_REDIS_URL", default=None, help="Redis URL for the caches.")
@click.option("--keys", "keys_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help=_KEYS_HELP)
@click.option("--trust", type=click.Choice(["system", "learned", "external"]), default=None,
              help="Trust level of rows written through the API (default: the engine's).")
@click.option("--max-body", default=1_000_000, show_default=True, type=click.IntRange(min=1024),
              help="Largest request body in bytes.")
@click.option("--temporal", "temporal_address", default=None, metavar="HOST:PORT",
              help="Temporal server: enables execution 'temporal' on POST /api/memory/jobs (run `manowar worker` "
              "on the same store and task queue).")
@click.option("--temporal-namespace", envvar="TEMPORAL_NAMESPACE", default="default", show_default=True)
@click.option("--temporal-task-queue", default=None, help="Task queue of the workers (default: manowar.memory.activities).")
@click.option("--agent-jobs", is_flag=True,
              help="Let agent-level scopes (a key without a user) run maintenance over every user's rows of the "
              "agent and manage its schedules; without it every job acts on the caller's own rows.")
@click.option("--allow-pin", is_flag=True,
              help="Let callers publish archives to IPFS (pin): a public pin cannot be taken back.")
def serve(host: str, port: int, store: str | None, embedder: str, redis_url: str | None, keys_file: Path | None,
          trust: str | None, max_body: int, temporal_address: str | None, temporal_namespace: str,
          temporal_task_queue: str | None, agent_jobs: bool, allow_pin: bool) -> None:
    """Serve the REST API (OpenAPI at /openapi.json, docs at /docs)."""
    keys = _server_keys(keys_file)
    from .server.app import check_bind, create_app

    check_bind(host, keys)
    import uvicorn

    with _server_engine(store, embedder, redis_url) as engine:
        _announce_embedder(engine)
        app = create_app(engine, keys=keys, trust=trust, max_body_bytes=max_body, temporal_address=temporal_address,
                         temporal_namespace=temporal_namespace, temporal_task_queue=temporal_task_queue,
                         agent_jobs=agent_jobs, allow_pin=allow_pin)
        from .server.app import uvicorn_options

        opts = uvicorn_options()
        click.echo(f"manowar serve: http://{host}:{port} store={engine.store_name} keys={len(keys)} "
                   f"loop={opts['loop']} http={opts['http']}", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", **opts)  # type: ignore[arg-type]


@cli.command("mcp")
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP (at /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (--http).")
@click.option("--port", default=8081, show_default=True, type=click.IntRange(0, 65535), help="Port (--http).")
@click.option("--agent", envvar="MANOWAR_AGENT", default=None, help="Agent id of the scope (env MANOWAR_AGENT).")
@click.option("--user", envvar="MANOWAR_USER", default=None, help="User id of the scope (env MANOWAR_USER).")
@click.option("--thread", envvar="MANOWAR_THREAD", default=None, help="Thread id (env MANOWAR_THREAD).")
@click.option("--mode", envvar="MANOWAR_MODE", type=click.Choice(["global", "local"]), default=None)
@click.option("--hai", envvar="MANOWAR_HAI", default=None, help="HAI id (env MANOWAR_HAI).")
@click.option("--groups", default="memory,items", show_default=True, help="Tool groups of the catalog (memory, items, jobs, notes, erasure; notes act in the server's project).")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--embedder", default="auto", show_default=True, help=_EMBEDDER_HELP)
@click.option("--redis", "redis_url", envvar="MANOWAR_REDIS_URL", default=None, help="Redis URL for the caches.")
@click.option("--keys", "keys_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help=_KEYS_HELP + " (--http)")
@click.option("--trust", type=click.Choice(["system", "learned", "external"]), default=None,
              help="Trust level of rows the tools write (default: the engine's).")
@click.option("--agent-jobs", is_flag=True,
              help="Let agent-level scopes (a key without a user) run maintenance over every user's rows of the "
              "agent and manage its schedules; without it every job acts on the caller's own rows.")
@click.option("--allow-pin", is_flag=True,
              help="Let callers publish archives to IPFS (pin): a public pin cannot be taken back.")
@click.option("--print-config", "print_config", type=click.Choice(["claude", "vscode", "cursor"]), default=None,
              help="Print the client's configuration that starts this stdio server (absolute paths), then exit.")
def mcp_command(http: bool, host: str, port: int, agent: str | None, user: str | None, thread: str | None,
                mode: str | None, hai: str | None, groups: str, store: str | None, embedder: str,
                redis_url: str | None, keys_file: Path | None, trust: str | None, agent_jobs: bool,
                allow_pin: bool,
                print_config: str | None) -> None:
    """Serve the memory tools over MCP: stdio for one configured scope, or --http with API keys."""
    import asyncio

    if print_config:
        _print_client_config(print_config, agent, user, thread, groups, store, embedder)
        return

    keys = _server_keys(keys_file) if http else None

    fields = {"agentWallet": agent, "userAddress": user, "threadId": thread, "mode": mode, "haiId": hai}
    fields = {k: v for k, v in fields.items() if v is not None}
    if not http and not agent:
        raise click.UsageError("stdio serves one scope: pass --agent (or set MANOWAR_AGENT)")
    if keys is not None:  # --http
        from .server.app import check_bind

        check_bind(host, keys)
        if not keys and not agent:
            raise click.UsageError("without API keys the HTTP server serves one scope: pass --agent")
    with _server_engine(store, embedder, redis_url) as engine:
        _announce_embedder(engine)
        engine.warm_up()  # the model loads now, not in the first tool call
        scope = fields if (http and keys) else Scope.from_dict(fields)
        server = mcp_server.build_mcp_server(engine, scope=scope, keys=keys if http else None,
                                             groups=[g.strip() for g in groups.split(",") if g.strip()], trust=trust,
                                             agent_jobs=agent_jobs, allow_pin=allow_pin)
        if keys is None:  # stdio
            asyncio.run(mcp_server.run_stdio(server))
            return
        import uvicorn

        click.echo(f"manowar mcp: http://{host}:{port}/mcp store={engine.store_name} keys={len(keys)}", err=True)
        uvicorn.run(mcp_server.mcp_http_app(server, keys, host=host), host=host, port=port, log_level="warning")


def _print_client_config(client: str, agent: str | None, user: str | None, thread: str | None, groups: str,
                         store: str | None, embedder: str) -> None:
    from click.core import ParameterSource

    if not agent:
        raise click.UsageError("the client starts a stdio server for one scope: pass --agent (or set MANOWAR_AGENT)")
    ctx = click.get_current_context()
    given = {name for name in ("groups", "embedder")
             if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)}
    config = client_config(client, agent=agent, user=user, thread=thread, store=store,
                           groups=[g.strip() for g in groups.split(",") if g.strip()] if "groups" in given else None,
                           embedder=embedder if "embedder" in given else None)
    click.echo(json.dumps(config, indent=2))
    click.echo(f"# paste into {CLIENTS[client]}", err=True)


@cli.command()
@click.option("--agent", required=True, help="Agent id (agentWallet).")
@click.option("--user", default=None, help="The user to erase (without it: the agent's shared, user-less rows).")
@click.option("--mode", type=click.Choice(["global", "local"]), default=None)
@click.option("--hai", default=None, help="HAI id.")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def forget(agent: str, user: str | None, mode: str | None, hai: str | None, store: str | None, yes: bool) -> None:
    """Erase everything a scope owns: rows of every layer, transcripts, sessions, patterns, archives
    (the agent's archives rewritten without them) and index entries; prints what was removed."""
    scope = Scope.from_dict({"agentWallet": agent, "userAddress": user, "mode": mode, "haiId": hai})
    who = f"user {scope.user_address!r}" if scope.user_address else "the agent's shared (user-less) rows"
    if not yes:
        click.confirm(f"Erase everything of {who} of agent {scope.agent_wallet!r}?", abort=True)
    with _engine(store, "none") as engine:
        report = engine.forget(scope)
    click.echo(json.dumps(report.model_dump()))


@cli.command("api-key")
@click.option("--agent", required=True, help="The agent the key acts for.")
@click.option("--user", default=None, help="The only user the key may act for.")
@click.option("--name", default=None, help="A label for the key.")
def api_key(agent: str, user: str | None, name: str | None) -> None:
    """Print a new API key (stderr) and its key-file entry, which stores only the hash (stdout)."""
    for flag, value in (("--agent", agent), ("--user", user)):
        if value is not None and not value.strip():
            raise click.BadParameter("is blank: give the id, or leave --user out for a key of any user", param_hint=flag)
    key = new_key()
    entry = {"sha256": hash_key(key), "agentWallet": agent}
    if user is not None:
        entry["userAddress"] = user
    if name:
        entry["name"] = name
    click.echo(f"API key (shown once): {key}", err=True)
    click.echo(json.dumps(entry))

cli.add_command(schedules)
cli.add_command(notes_cli, name="notes")


def main() -> None:
    """Entry point: library errors become one clear line and exit code 2."""
    loaded_before = _TEMPORAL_CORE in sys.modules  # a host process (a test run) loaded it: not ours to skip
    code = 0
    try:
        result = cli(standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except click.exceptions.Abort:
        code = 130
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except ManowarError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 2
    _exit(code, finalize=loaded_before or _TEMPORAL_CORE not in sys.modules)


#: Temporal's Rust core, as Python imports it
_TEMPORAL_CORE = "temporalio.bridge.temporal_sdk_bridge"


def _exit(code: int, *, finalize: bool) -> None:
    """End the process with ``code``. Once the command has loaded Temporal's Rust core (the
    worker, ``serve --temporal``, schedules), its threads outlive the event loop and can abort
    the interpreter while it finalizes ("PyGILState_Release: thread state ... must be current",
    temporalio/sdk-python#300): the command has already closed its stores, so with ``finalize``
    false flush the output and leave without finalizing. Otherwise exit normally (``main()``
    called in a process that had loaded the core before, a test run, must not end it)."""
    if finalize:
        sys.exit(code)
    import logging
    import os

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to flush into
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
