"""Liveness and readiness probes, outside ``/api/memory``."""

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..deps import settings_of

__all__ = ["router"]

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness of the store, cache and embedder",
            responses={503: {"description": "A dependency is down"}})
def readyz(request: Request) -> JSONResponse:
    engine = settings_of(request).engine
    embedder = engine.embedder
    checks = {"store": _check(engine.check_store),
              "cache": _check(lambda: _ping_cache(engine.cache)),
              "embedder": "none" if embedder is None else _check(
                  lambda: embedder.embed(["readyz"], input_type="query"))}
    ok = all(v in ("ok", "none") for v in checks.values())
    return JSONResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)


def _check(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        return f"error: {type(exc).__name__}"
    return "ok"


def _ping_cache(cache: Any) -> None:
    client = getattr(cache, "client", None)
    if client is not None and hasattr(client, "ping"):
        client.ping()
    else:
        cache.get("readyz-probe")
