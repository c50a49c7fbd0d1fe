"""MCP client configurations for ``manowar mcp`` (``manowar mcp --print-config CLIENT``).

A desktop client starts the server itself, from its own working directory and often with a
reduced ``PATH``: the configuration names the ``manowar`` executable by its absolute path and a
SQLite store by an absolute URL, or the server would not start (or would open another file).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidInputError

__all__ = ["CLIENTS", "SERVER_NAME", "client_config", "server_command"]

#: The clients whose configuration format is known, and the file each reads it from.
CLIENTS: dict[str, str] = {
    "claude": "claude_desktop_config.json (Claude Desktop: Settings > Developer > Edit Config)",
    "vscode": ".vscode/mcp.json in the workspace (VS Code: MCP: Open Workspace Folder Configuration)",
    "cursor": ".cursor/mcp.json in the project, or ~/.cursor/mcp.json",
}

#: The name the server is listed under.
SERVER_NAME = "manowar-memory"

Client = Literal["claude", "vscode", "cursor"]


def server_command(argv0: str | None = None) -> list[str]:
    """The absolute command that starts ``manowar``: the running ``manowar`` script (``argv0``,
    default ``sys.argv[0]``), else the one on ``PATH``, else this interpreter with
    ``-m manowar_memory.cli``."""
    candidates = [argv0 if argv0 is not None else sys.argv[0], shutil.which("manowar")]
    for candidate in candidates:
        if candidate and Path(candidate).name == "manowar":
            path = Path(candidate)
            if not path.is_absolute():
                found = shutil.which(candidate) if os.sep not in candidate else str(path.resolve())
                path = Path(found) if found else path.resolve()
            if path.is_file():
                return [str(path.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "manowar_memory.cli"]


def _absolute_store(store: str) -> str:
    """``store`` with a relative SQLite path made absolute (the client starts the server elsewhere)."""
    prefix = "sqlite:///"
    if store.startswith(prefix):
        path = store[len(prefix):]
        if path and path != ":memory:" and not Path(path).is_absolute():
            return prefix + str(Path(path).resolve())
    return store


def client_config(client: str, *, agent: str, user: str | None = None, thread: str | None = None,
                  groups: Sequence[str] | None = None, store: str | None = None, embedder: str | None = None,
                  command: Sequence[str] | None = None) -> dict[str, Any]:
    """The configuration that makes ``client`` (``claude``, ``vscode`` or ``cursor``) start
    ``manowar mcp`` over stdio for ``agent`` (and ``user``, ``thread``): the command by its
    absolute path (``command``, default :func:`server_command`), the arguments, and an ``env``
    block naming ``MANOWAR_EMBEDDER`` (when ``embedder`` is given), ``MANOWAR_HOME``, the
    directory of the default store (when ``store`` is not given), and ``PYTHONPATH`` made
    absolute when it is set (a checkout run from source). A relative SQLite ``store`` is made
    absolute."""
    if client not in CLIENTS:
        raise InvalidInputError(f"unknown MCP client {client!r}: use one of {sorted(CLIENTS)}")
    if not agent or not agent.strip():
        raise InvalidInputError("the client config serves one scope: give the agent (--agent or MANOWAR_AGENT)")
    cmd = list(command) if command is not None else server_command()
    args = [*cmd[1:], "mcp", "--agent", agent]
    for flag, value in (("--user", user), ("--thread", thread)):
        if value:
            args += [flag, value]
    if groups:
        args += ["--groups", ",".join(groups)]
    env: dict[str, str] = {}
    if store:
        args += ["--store", _absolute_store(store)]
    else:
        env["MANOWAR_HOME"] = str(Path(os.environ.get("MANOWAR_HOME", "~/.manowar")).expanduser().absolute())
    if embedder:
        args += ["--embedder", embedder]
        env["MANOWAR_EMBEDDER"] = embedder
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)
    entry: dict[str, Any] = {"command": cmd[0], "args": args, "env": env}
    if client == "vscode":
        return {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    return {"mcpServers": {SERVER_NAME: entry}}
