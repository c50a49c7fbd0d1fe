"""Which project the caller is in: the normalised ``origin`` remote, else the repository root path.

Rules, in order:

1. ``MANOWAR_PROJECT_ID`` set: that id (``identity_kind="override"``); git is not run.
2. The root: ``MANOWAR_PROJECT_ROOT``, else ``git rev-parse --show-toplevel``, else the directory.
3. The identity source: the normalised ``git remote get-url origin`` (``git_remote``), else the
   absolute root path (``repo_path``). Different spellings of one remote (scp style, https,
   ssh with a user or port, a trailing ``.git`` or slash) normalise to the same ``host/path``.
4. The id: the first 16 hex characters of sha256 of the source; the name is the root's directory
   name unless ``MANOWAR_PROJECT_NAME`` says otherwise.

Every git call runs with a short timeout (3 s by default) in its own process group, killed on
expiry, so a hung or missing git falls back to the path identity.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from ..errors import InvalidInputError

__all__ = ["ProjectIdentity", "check_project_id", "normalize_remote", "resolve_project"]

IdentityKind = Literal["override", "git_remote", "repo_path"]
GIT_TIMEOUT_S = 3.0
_CACHE_TTL_S = 30.0
_CACHE_MAX = 512
_cache: dict[tuple[object, ...], tuple[float, ProjectIdentity]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class ProjectIdentity:
    """A project: its id (a safe path segment), display name, root directory and how the id was found."""

    id: str
    name: str
    root: str
    identity_kind: IdentityKind
    identity_source: str


def check_project_id(value: str) -> str:
    """``value`` if it is usable as a project id: non-empty, not ``.``/``..``, no ``/``, ``\\`` or NUL."""
    if not isinstance(value, str) or not value.strip() or value.strip() in (".", "..") or any(
            ch in value for ch in "/\\\x00"):
        raise InvalidInputError(f"project id {value!r} is not usable: give a non-empty id without '/', '\\' or NUL")
    return value.strip()


def normalize_remote(url: str) -> str:
    """One spelling per remote: ``host/path`` with the host lower-cased, user, port, trailing
    ``.git`` and slashes dropped; ``file://`` URLs and bare paths become resolved absolute paths."""
    url = url.strip()
    if url.lower().startswith("file://"):
        return str(Path(url[7:]).resolve())
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", url):
        parts = urlsplit(url)
        host, path = (parts.hostname or "").lower(), parts.path
    else:
        scp = re.match(r"^(?:[^@/:]+@)?([^/:]+):(?!//)(.*)$", url)
        if scp is None or (len(scp.group(1)) == 1 and os.name == "nt"):
            return str(Path(url).expanduser().resolve())
        host, path = scp.group(1).lower(), scp.group(2)
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return f"{host}/{path.strip('/')}"


def _git(args: list[str], cwd: str, timeout: float) -> str | None:
    """stdout of ``git args`` run in ``cwd``, or None when git fails, is missing or outlives ``timeout``."""
    try:
        proc = subprocess.Popen(["git", *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    text = out.decode("utf-8", "replace").strip()
    return text or None


def _git_config_stamp(start: Path) -> int | None:
    """mtime_ns of the repository's config (following ``gitdir:`` files and ``commondir``), no process started."""
    for base in (start, *start.parents):
        dotgit = base / ".git"
        if dotgit.is_dir():
            gitdir = dotgit
        elif dotgit.is_file():
            text = dotgit.read_text(errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = (base / text[7:].strip()).resolve()
        else:
            continue
        common = gitdir / "commondir"
        if common.is_file():
            gitdir = (gitdir / common.read_text(errors="replace").strip()).resolve()
        try:
            return (gitdir / "config").stat().st_mtime_ns
        except OSError:
            return None
    return None


def resolve_project(cwd: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None,
                    git_timeout: float = GIT_TIMEOUT_S, use_cache: bool = True) -> ProjectIdentity:
    """The project of ``cwd`` (default: the working directory); see the module doc for the rules."""
    env = os.environ if env is None else env
    start = Path(cwd if cwd is not None else os.getcwd()).expanduser().resolve()
    overrides = tuple(env.get(f"MANOWAR_PROJECT_{k}") for k in ("ROOT", "ID", "NAME"))
    key = (str(start), overrides, _git_config_stamp(start), git_timeout)
    now = time.monotonic()
    if use_cache:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None and now - hit[0] < _CACHE_TTL_S:
                return hit[1]
    ident = _resolve(start, env, git_timeout)
    if use_cache:
        with _cache_lock:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[key] = (now, ident)
    return ident


def _resolve(start: Path, env: Mapping[str, str], timeout: float) -> ProjectIdentity:
    root_env, id_env, name_env = (env.get(f"MANOWAR_PROJECT_{k}", "").strip() or None for k in ("ROOT", "ID", "NAME"))
    if id_env is not None:
        root = Path(root_env).expanduser().resolve() if root_env else start
        pid = check_project_id(id_env)
        return ProjectIdentity(pid, name_env or root.name or pid, str(root), "override", pid)
    if root_env:
        root = Path(root_env).expanduser().resolve()
    else:
        top = _git(["rev-parse", "--show-toplevel"], str(start), timeout) if start.is_dir() else None
        root = Path(top).resolve() if top else start
    remote = _git(["remote", "get-url", "origin"], str(root), timeout) if root.is_dir() else None
    if remote:
        source, kind = normalize_remote(remote), "git_remote"
    else:
        source, kind = str(root), "repo_path"
    pid = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    return ProjectIdentity(pid, name_env or root.name or pid, str(root), kind, source)  # type: ignore[arg-type]
