"""``manowar schedules``: list, create, delete, pause, resume, trigger and run the maintenance
schedules, inline (kept in the store) or on Temporal."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from .engine import MemoryEngine
from .jobs.schedules import (
    InlineSchedules,
    ScheduleBackend,
    ScheduleInfo,
    ScheduleSettings,
    discover_agent_wallets,
    install_schedules,
    remove_schedules,
    schedule_table,
)

__all__ = ["schedules"]

T = TypeVar("T")


def _common(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--backend", type=click.Choice(["inline", "temporal"]), default="inline", show_default=True,
                     envvar="MANOWAR_SCHEDULE_BACKEND", help="Where the schedules live (env MANOWAR_SCHEDULE_BACKEND)."),
        click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME)."),
        click.option("--address", envvar="TEMPORAL_ADDRESS", default="127.0.0.1:7233", show_default=True,
                     help="Temporal host:port (env TEMPORAL_ADDRESS)."),
        click.option("--namespace", envvar="TEMPORAL_NAMESPACE", default="default", show_default=True,
                     help="Temporal namespace (env TEMPORAL_NAMESPACE)."),
        click.option("--task-queue", default=None, help="Temporal task queue (default: manowar.memory.activities)."),
        click.option("--id-prefix", default="", help="Prefix of the schedule ids on the Temporal server."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _with_backend(ctx_args: dict[str, Any], action: Callable[[ScheduleBackend, Any], Coroutine[Any, Any, T]]) -> T:
    engine = MemoryEngine(store=ctx_args["store"], embedder=None)
    try:
        if ctx_args["backend"] == "inline":
            return asyncio.run(action(InlineSchedules(engine), engine))

        async def on_temporal() -> T:
            try:
                from .jobs.temporal import connect_temporal
                from .jobs.temporal_schedules import TemporalSchedules
            except ImportError as exc:
                raise click.ClickException(f'the Temporal backend needs temporalio: pip install '
                                           f'"manowar-memory[temporal]" ({exc})') from None
            client = await connect_temporal(ctx_args["address"], ctx_args["namespace"])
            backend = TemporalSchedules(client, task_queue=ctx_args["task_queue"], id_prefix=ctx_args["id_prefix"],
                                        store=engine.maintenance_store())
            return await action(backend, engine)

        return asyncio.run(on_temporal())
    finally:
        engine.close()


def _common_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in ("backend", "store", "address", "namespace", "task_queue", "id_prefix")}


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(info: ScheduleInfo) -> str:
    s = info.schedule
    state = "paused" if info.paused else ("running" if info.running else "active")
    return (f"{s.schedule_id:<44} {s.cron:<14} {s.timezone:<6} {s.overlap:<10} {state:<7} "
            f"next {_iso(info.next_fire_at)}  last {info.last_status or '-'}")


def _command(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        return fn(_common_args(kwargs), **kwargs)

    return _common(wrapper)


@click.group()
def schedules() -> None:
    """Maintenance schedules (consolidation, patterns, archives, decay, cleanup)."""


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_command
def list_cmd(common: dict[str, Any], as_json: bool) -> None:
    """Show the schedules with their cron, overlap policy and next fire time."""
    infos = _with_backend(common, lambda b, _e: b.alist())
    if as_json:
        click.echo(json.dumps([i.model_dump(mode="json") for i in infos], indent=2))
    elif not infos:
        click.echo("no schedules; create them with `manowar schedules create`")
    for info in infos if not as_json else []:
        click.echo(_line(info))


@schedules.command("create")
@click.option("--agent", "agents", multiple=True, help="Agent wallet to give per-agent schedules (repeatable).")
@click.option("--discover/--no-discover", default=True, show_default=True,
              help="Also give them to every agent found in the store (at most MEMORY_AUTO_SCHEDULE_LIMIT).")
@_command
def create_cmd(common: dict[str, Any], agents: tuple[str, ...], discover: bool) -> None:
    """Create (or replace in place) the schedule table; crons come from the MEMORY_*_CRON variables."""
    settings = ScheduleSettings.from_env()

    async def action(backend: ScheduleBackend, engine: Any) -> list[ScheduleInfo]:
        found = discover_agent_wallets(engine, settings.auto_schedule_limit) if discover else []
        return await install_schedules(backend, schedule_table([*agents, *found], settings))

    for info in _with_backend(common, action):
        click.echo(_line(info))


@schedules.command("delete")
@click.argument("schedule_ids", nargs=-1)
@click.option("--all", "delete_all", is_flag=True, help="Delete every schedule (and the legacy ids).")
@_command
def delete_cmd(common: dict[str, Any], schedule_ids: tuple[str, ...], delete_all: bool) -> None:
    """Delete schedules by id (a run in progress finishes)."""
    if not schedule_ids and not delete_all:
        raise click.UsageError("give schedule ids, or --all")

    async def action(backend: ScheduleBackend, _engine: Any) -> list[tuple[str, bool]]:
        if delete_all:
            return [(sid, True) for sid in await remove_schedules(backend)]
        return [(sid, await backend.adelete(sid)) for sid in schedule_ids]

    for sid, done in _with_backend(common, action):
        click.echo(f"{'deleted' if done else 'not found'} {sid}")


@schedules.command("pause")
@click.argument("schedule_id")
@click.option("--note", default=None, help="Why (shown by list --json).")
@_command
def pause_cmd(common: dict[str, Any], schedule_id: str, note: str | None) -> None:
    """Stop a schedule from firing until it is resumed."""
    click.echo(_line(_with_backend(common, lambda b, _e: b.apause(schedule_id, note))))


@schedules.command("resume")
@click.argument("schedule_id")
@click.option("--note", default=None, help="Why (shown by list --json).")
@_command
def resume_cmd(common: dict[str, Any], schedule_id: str, note: str | None) -> None:
    """Resume a paused schedule from its next fire time."""
    click.echo(_line(_with_backend(common, lambda b, _e: b.aresume(schedule_id, note))))


@schedules.command("trigger")
@click.argument("schedule_id")
@_command
def trigger_cmd(common: dict[str, Any], schedule_id: str) -> None:
    """Run a schedule's job now (inline: here, and wait for it; temporal: on the workers)."""
    async def action(backend: ScheduleBackend, _engine: Any) -> str:
        if isinstance(backend, InlineSchedules):
            job = await asyncio.to_thread(backend.trigger, schedule_id)
            if job is None:
                return f"{schedule_id}: a run is still going; the trigger was skipped or queued (overlap policy)"
            return f"{schedule_id}: job {job.job_id} {job.status}" + (f" ({job.error})" if job.error else "")
        await backend.atrigger(schedule_id)
        return f"{schedule_id}: triggered on Temporal"

    click.echo(_with_backend(common, action))


@schedules.command("run")
@click.option("--poll", default=30.0, show_default=True, type=click.FloatRange(min=0.1), help="Seconds between ticks.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1), help="Runs at the same time.")
@click.option("--once", is_flag=True, help="Run what is due now, then exit.")
@click.option("--store", default=None, help="Store URL (default: the SQLite file under $MANOWAR_HOME).")
def run_cmd(poll: float, workers: int, once: bool, store: str | None) -> None:
    """Run the inline schedules in this process (Temporal schedules run on the Temporal workers)."""
    def report(job: Any) -> None:
        click.echo(f"{(job.data or {}).get('scheduleId')}: job {job.job_id} {job.status}"
                   + (f" ({job.error})" if job.error else ""))

    with MemoryEngine(store=store, embedder=None) as engine:
        backend = InlineSchedules(engine)
        if once:
            for job in backend.run_due():
                report(job)
            return
        stop = threading.Event()
        click.echo(f"running {len(backend.list())} inline schedules every {poll:g} s (Ctrl-C to stop)")
        try:
            backend.run_forever(poll_s=poll, stop=stop, max_workers=workers, on_job=report)
        except KeyboardInterrupt:
            stop.set()
