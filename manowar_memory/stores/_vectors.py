"""The in-process vector index both stores keep per embedding model.

One float32 matrix of normalised vectors plus the columns the scope mask needs (agent, user,
mode, hai, source as interned integer codes; live and active flags). Rows are keyed by the
store's own row key (SQLite ``rowid``, MongoDB ``_id``); the store decides when to refresh
it (SQLite from its revision counter, MongoDB from its sync watermark). Scores are cosine;
the stores report ``(1 + cos) / 2``.

Rows are grouped by (agent, user): one conversation scope's own rows. A query scans exactly
the rows its mask allows (only those rows, so other scopes' growth costs it a mask pass and
nothing more) until a group it reads holds ``ann_threshold`` allowed rows or more; such a group
gets an approximate index (:class:`~._ann.AnnGroup`, faiss IVF with 4-bit fast-scan codes) that is kept
in sync with every upsert and removal, rebuilt when the group has doubled since it was trained,
and whose candidates are re-scored exactly, so reported scores are always exact cosines.
With a ``persist_path`` (the SQLite file store) the approximate indexes are saved beside the
database, keyed to the store's revision, and reused on open only at that same revision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .._util import now_ms
from ._ann import CODE_BYTES_PER_DIM, ID_BYTES, AnnGroup
from .base import MemoryQuery

__all__ = ["DEFAULT_ANN_THRESHOLD", "VectorIndex"]

log = logging.getLogger(__name__)

_COLUMNS = ("agent", "user", "mode", "hai", "source", "group", "live", "active", "in_ann", "expires")
_ROW_OVERHEAD = 8 * 4 + 120  # code columns, flags and the key's dict/list entries, roughly
_PERSIST_VERSION = 2  # 2: fast-scan product codes (version 1 files held 8-bit codes: rebuilt)


def _threshold_from_env() -> int:
    raw = os.environ.get("MANOWAR_ANN_THRESHOLD", "").strip()
    if not raw:
        return 20_000
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"MANOWAR_ANN_THRESHOLD must be a whole number of rows (0 turns ANN off), got {raw!r}") from None
    return max(0, value)


#: Allowed rows of one (agent, user) group from which a query uses the approximate index
#: (``MANOWAR_ANN_THRESHOLD``; 0 turns it off). Below it the scan is exact.
DEFAULT_ANN_THRESHOLD = _threshold_from_env()


class VectorIndex:
    """Every vector of one embedding model (optionally one agent), as a matrix."""

    #: Allowed rows of one group from which queries use the approximate index (0: never).
    ann_threshold: int = DEFAULT_ANN_THRESHOLD
    #: Candidates asked of the approximate index per result (and at least ``ann_min_candidates``),
    #: all re-scored exactly: 4-bit codes rank coarsely, and re-scoring a few hundred rows costs
    #: ~0.1 ms, far less than probing more of the group.
    ann_oversample: int = 8
    ann_min_candidates: int = 256

    def __init__(
        self, dims: int, capacity: int = 1024, *, ann_threshold: int | None = None, persist_path: str | Path | None = None,
    ) -> None:
        if ann_threshold is not None:
            if isinstance(ann_threshold, bool) or not isinstance(ann_threshold, int) or ann_threshold < 0:
                raise ValueError(f"ann_threshold must be a whole number of rows >= 0 (0 turns ANN off), got {ann_threshold!r}")
            self.ann_threshold = ann_threshold
        self.persist_path = Path(persist_path) if persist_path is not None else None
        self.dims = dims
        self.size = 0
        self.live_count = 0
        capacity = max(16, capacity)
        self.vectors = np.zeros((capacity, dims), dtype=np.float32)
        self.agent = np.zeros(capacity, dtype=np.int32)
        self.user = np.zeros(capacity, dtype=np.int32)
        self.mode = np.zeros(capacity, dtype=np.int32)
        self.hai = np.zeros(capacity, dtype=np.int32)
        self.source = np.zeros(capacity, dtype=np.int32)
        self.group = np.zeros(capacity, dtype=np.int32)
        self.live = np.zeros(capacity, dtype=bool)
        self.active = np.zeros(capacity, dtype=bool)
        self.in_ann = np.zeros(capacity, dtype=bool)  # the row's vector is in its group's ANN index
        self.expires = np.zeros(capacity, dtype=np.float64)  # metadata.expiresAt (epoch ms), inf: never
        self.keys: list[Hashable] = []
        self.position: dict[Hashable, int] = {}
        self.codes: dict[str | None, int] = {None: 0}
        self.groups: dict[tuple[int, int], int] = {}
        self.group_sizes: list[int] = []  # live rows per group
        self.lock = threading.Lock()
        self.ann: dict[int, AnnGroup] = {}
        self._ann_add: dict[int, set[int]] = {}  # per group: positions to (re)add before the next search
        self._ann_drop: dict[int, set[int]] = {}  # per group: positions to remove before the next search
        self._ann_lock = threading.Lock()  # guards the two queues above (writers do not hold ``lock``)
        self._synced_rev: int | None = None
        self._saved_rev: int | None = None
        self._version = 0  # bumped by every change of a row: the masks cached below are of one version
        self._masks: dict[tuple[Any, ...], tuple[int, float, float, np.ndarray, int]] = {}

    @staticmethod
    def row_bytes(dims: int) -> int:
        """Approximate memory per row of ``dims`` dimensions (the cache bound uses it): the float32
        vector, the columns, and the row's share of an approximate index should its group get one."""
        return 4 * dims + _ROW_OVERHEAD + math.ceil(CODE_BYTES_PER_DIM * dims) + ID_BYTES

    @property
    def nbytes(self) -> int:
        """Approximate memory held, by allocated capacity (approximate indexes included)."""
        return self.vectors.shape[0] * self.row_bytes(self.dims)

    def _group_of(self, agent: int, user: int) -> int:
        gid = self.groups.get((agent, user))
        if gid is None:
            gid = self.groups[(agent, user)] = len(self.groups)
            self.group_sizes.append(0)
        return gid

    def _queue(self, gid: int, pos: int, *, add: bool) -> None:
        """Schedule an ANN removal of ``pos`` (and a re-add when ``add``) in group ``gid``."""
        with self._ann_lock:
            if self.in_ann[pos]:
                self._ann_drop.setdefault(gid, set()).add(pos)
            if add:
                self._ann_add.setdefault(gid, set()).add(pos)
            else:
                self._ann_add.get(gid, set()).discard(pos)

    def code(self, value: str | None) -> int:
        """Interned integer for a column value (0 is None)."""
        found = self.codes.get(value)
        if found is None:
            found = self.codes[value] = len(self.codes)
        return found

    def _grow(self) -> None:
        cap = self.vectors.shape[0] * 2
        self.vectors = np.resize(self.vectors, (cap, self.dims))
        for name in _COLUMNS:
            arr = getattr(self, name)
            new = np.zeros(cap, dtype=arr.dtype)
            new[: self.size] = arr[: self.size]
            setattr(self, name, new)

    def upsert(
        self, key: Hashable, vector: np.ndarray, *, agent: str | None, user: str | None, mode: str | None,
        hai: str | None, source: str | None, active: bool, expires_at: float | None = None,
    ) -> None:
        """Add or refresh one row (the vector is normalised here); ``expires_at``: its
        ``metadata.expiresAt`` (epoch ms) when that is a number, else None (never expires)."""
        norm = float(np.linalg.norm(vector))
        unit = vector / norm if norm else vector
        self._version += 1
        pos = self.position.get(key)
        fresh = pos is None
        if pos is None:
            if self.size == self.vectors.shape[0]:
                self._grow()
            pos = self.size
            self.size += 1
            self.position[key] = pos
            self.keys.append(key)
        gid = self._group_of(self.code(agent), self.code(user))
        old_gid = int(self.group[pos])
        if not self.live[pos]:
            self.live_count += 1
            self.group_sizes[gid] += 1
        elif old_gid != gid:
            self.group_sizes[old_gid] -= 1
            self.group_sizes[gid] += 1
        if old_gid != gid and not fresh:
            self._queue(old_gid, pos, add=False)
        if gid in self.ann and (fresh or old_gid != gid or not self.live[pos] or not np.array_equal(self.vectors[pos], unit)):
            self._queue(gid, pos, add=True)
        self.vectors[pos] = unit
        self.group[pos] = gid
        self.agent[pos] = self.code(agent)
        self.user[pos] = self.code(user)
        self.mode[pos] = self.code(mode)
        self.hai[pos] = self.code(hai)
        self.source[pos] = self.code(source)
        self.live[pos] = True
        self.active[pos] = active
        self.expires[pos] = math.inf if expires_at is None else float(expires_at)

    def remove(self, key: Hashable) -> None:
        """Mark a row dead (deleted, or re-embedded by another model)."""
        pos = self.position.get(key)
        if pos is not None and self.live[pos]:
            self._version += 1
            self.live[pos] = False
            self.live_count -= 1
            gid = int(self.group[pos])
            self.group_sizes[gid] -= 1
            self._queue(gid, pos, add=False)

    def live_keys(self) -> set[Hashable]:
        """Keys of the live rows."""
        return {self.keys[i] for i in np.flatnonzero(self.live[: self.size])}

    #: Masks kept per index (by scope, status and sources), each until a row changes or an
    #: allowed row expires: at a million rows a mask is a few passes over every row (~1 ms).
    cached_masks: int = 8

    def mask(self, query: MemoryQuery) -> np.ndarray:
        """Rows the query's scope, status, expiry (at ``query.now``, else now) and sources allow
        (filters and threads are the store's job). Read-only: it may be shared with later calls."""
        return self.mask_and_count(query)[0]

    def mask_and_count(self, query: MemoryQuery) -> tuple[np.ndarray, int]:
        """:meth:`mask` and the number of rows it allows. The same query over unchanged rows gets
        the same (read-only) array back, while no allowed row has expired since it was made and
        the time asked is not earlier than then."""
        now = float(query.now if query.now is not None else now_ms())
        s = query.scope
        key = (s.agent_wallet, s.user_address, s.mode, s.hai_id, query.active_only,
               None if query.sources is None else tuple(query.sources), tuple(query.exclude_sources))
        version = self._version  # before the mask: a row written meanwhile makes it stale, never cached as current
        held = self._masks.get(key)
        if held is not None and held[0] == version and held[1] <= now < held[2]:
            return held[3], held[4]
        mask = self._mask(query, now)
        until = math.inf
        if query.active_only:  # over the rows the mask covers: a writer may have appended rows since
            allowed = self.expires[: mask.shape[0]][mask]
            until = float(allowed.min()) if allowed.shape[0] else math.inf
        mask.flags.writeable = False
        count = int(np.count_nonzero(mask))
        if len(self._masks) >= self.cached_masks:
            self._masks.pop(next(iter(self._masks)))
        self._masks[key] = (version, now, until, mask, count)
        return mask, count

    def _mask(self, query: MemoryQuery, now: float) -> np.ndarray:
        n = self.size
        s = query.scope
        codes = self.codes
        agent = codes.get(s.agent_wallet)
        if agent is None:
            return np.zeros(n, dtype=bool)
        mask: np.ndarray = self.live[:n] & (self.agent[:n] == agent)
        if query.active_only:
            mask &= self.active[:n]
            mask &= self.expires[:n] > now
        user_col = self.user[:n]
        if s.user_address is not None:
            mask &= (user_col == codes.get(s.user_address, -1)) | (user_col == 0)
        else:
            mask &= user_col == 0
        for value, col in ((s.mode, self.mode), (s.hai_id, self.hai)):
            if value is not None:
                mask &= col[:n] == codes.get(value, -1)
        src = self.source[:n]
        if query.sources is not None:
            mask &= np.isin(src, [codes.get(x, -1) for x in query.sources])
        if query.exclude_sources:
            mask &= ~np.isin(src, [codes.get(x, -1) for x in query.exclude_sources])
        return mask

    def only(self, mask: np.ndarray, allowed: Iterable[Hashable]) -> np.ndarray:
        """``mask`` narrowed to the rows whose key is in ``allowed``."""
        keep = np.zeros(mask.shape[0], dtype=bool)
        positions = [p for p in (self.position.get(k) for k in allowed) if p is not None and p < mask.shape[0]]
        keep[positions] = True
        return mask & keep

    def groups_of(self, query: MemoryQuery) -> list[int]:
        """The groups whose rows :meth:`mask` can allow for ``query`` (its agent with its user,
        and with no user), for :meth:`top`."""
        s = query.scope
        agent = self.codes.get(s.agent_wallet)
        if agent is None:
            return []
        users = [0] if s.user_address is None else [self.codes.get(s.user_address, -1), 0]
        return [g for g in (self.groups.get((agent, u)) for u in users) if g is not None]

    def top(
        self, q: np.ndarray, mask: np.ndarray, k: int, groups: list[int] | None = None, count: int | None = None,
    ) -> list[tuple[Hashable, float]]:
        """The ``k`` best ``(key, cosine)`` among the masked rows, best first (ties in row order).
        ``q`` must be normalised. Exact below ``ann_threshold`` allowed rows per group.
        ``groups``: the only groups the mask can allow (:meth:`groups_of`), if known; when one
        of them has live rows, the allowed rows are not counted per group (a pass over them).
        ``count``: the rows the mask allows, if known (:meth:`mask_and_count`)."""
        n = mask.shape[0]
        candidates = int(np.count_nonzero(mask)) if count is None else count
        if candidates == 0 or k <= 0:
            return []
        k = min(k, candidates)
        if self.ann_threshold and candidates >= self.ann_threshold:
            live = [g for g in groups if self.group_sizes[g] > 0] if groups is not None else []
            pool = self._ann_pool(q, mask, k, live[0] if len(live) == 1 else None, candidates)
            if pool is not None:
                scores = self.vectors[pool] @ q
                order = np.lexsort((pool, -scores))[:k]
                return [(self.keys[int(pool[i])], float(scores[i])) for i in order]
        if candidates * 2 > n:  # most rows: one product over the whole matrix beats a gather
            scores = np.where(mask, self.vectors[:n] @ q, -np.inf)
            best = np.argpartition(-scores, k - 1)[:k]
            best = best[np.argsort(-scores[best], kind="stable")]
            return [(self.keys[i], float(scores[i])) for i in best]
        rows = np.flatnonzero(mask)
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        # rows that lie close together (a scope written in runs): one product over their span, a view
        # of the matrix, costs less than gathering them into a copy first
        clustered = hi - lo <= 2 * rows.shape[0]
        scores = (self.vectors[lo:hi] @ q)[rows - lo] if clustered else self.vectors[rows] @ q
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.lexsort((rows[best], -scores[best]))]
        return [(self.keys[int(rows[i])], float(scores[i])) for i in best]

    # -- approximate path --
    def _ann_pool(
        self, q: np.ndarray, mask: np.ndarray, k: int, only: int | None = None, candidates: int = 0,
    ) -> np.ndarray | None:
        """Positions to re-score exactly: the ANN candidates of each large group plus every
        allowed row of the small ones; None when no group is large enough (scan exactly).
        ``only``: the one group every allowed row (``candidates`` of them) belongs to, if known."""
        if only is not None:
            if candidates < self.ann_threshold:
                return None
            found = self._group_candidates(only, candidates, q, mask, k)
            return None if found is None else np.unique(found)
        rows = np.flatnonzero(mask)
        gids = self.group[rows]
        first = int(gids[0])
        if (gids == first).all():  # the common case, one group: no per-group count over the rows
            counts = {first: int(gids.shape[0])}
        else:
            per_group = np.bincount(gids)
            counts = {int(g): int(per_group[g]) for g in np.flatnonzero(per_group)}
        large = [g for g, c in counts.items() if c >= self.ann_threshold]
        if not large:
            return None
        parts: list[np.ndarray] = []
        exact = np.ones(rows.shape[0], dtype=bool)
        for gid in large:
            found = self._group_candidates(gid, counts[gid], q, mask, k)
            if found is not None:
                parts.append(found)
                exact &= gids != gid
        if not parts:
            return None
        parts.append(rows[exact])
        return np.unique(np.concatenate(parts))

    def _group_candidates(self, gid: int, count: int, q: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray | None:
        """The ANN candidates of group ``gid`` (``count`` of its rows allowed by ``mask``), or None
        when its rows are to be scanned exactly (no index, or too few candidates found)."""
        ann = self._ann_ready(gid)
        if ann is None:
            return None
        # every live row of the group allowed: the index holds exactly those, no filter needed
        allowed = None if count >= self.group_sizes[gid] else mask
        share = count / max(1, self.group_sizes[gid])
        found = ann.search(q, max(k * self.ann_oversample, self.ann_min_candidates), allowed, share)
        return found if found is not None and found.shape[0] >= min(k, count) else None

    def _ann_ready(self, gid: int) -> AnnGroup | None:
        """Group ``gid``'s ANN index, built, rebuilt or brought up to date first as needed."""
        live = self.group_sizes[gid]
        ann = self.ann.get(gid)
        if ann is None or live > 2 * ann.trained_on or ann.ntotal > 2 * max(live, 1):
            if live < self.ann_threshold:
                return None
            self._build(gid)
            return self.ann.get(gid)
        with self._ann_lock:
            drop = self._ann_drop.pop(gid, set())
            add = self._ann_add.pop(gid, set())
        if drop:
            labels = np.fromiter(drop, dtype=np.int64, count=len(drop))
            ann.remove(labels)
            self.in_ann[labels] = False
        if add:
            labels = np.fromiter(add, dtype=np.int64, count=len(add))
            labels = labels[self.live[labels] & (self.group[labels] == gid)]
            ann.add(self.vectors[labels], labels)
            self.in_ann[labels] = True
        return ann

    def _build(self, gid: int) -> None:
        started = time.perf_counter()
        with self._ann_lock:
            self._ann_drop.pop(gid, None)
            self._ann_add.pop(gid, None)
            old = self.ann.pop(gid, None)
            n = self.size
            if old is not None:
                self.in_ann[:n][self.group[:n] == gid] = False
            labels = np.flatnonzero(self.live[:n] & (self.group[:n] == gid)).astype(np.int64)
            self.ann[gid] = AnnGroup.build(self.vectors[labels], labels)
            self.in_ann[labels] = True
        log.info("vector index: ANN index of %d rows built in %.1f s", labels.shape[0], time.perf_counter() - started)
        if self._synced_rev is not None:
            self.persist(self._synced_rev)

    # -- persistence (SQLite file store) --
    @staticmethod
    def persist_file(db_path: str | Path, model_id: str) -> Path:
        """Where the ANN indexes of ``model_id``'s vectors are saved beside a database file."""
        digest = hashlib.sha256(model_id.encode()).hexdigest()[:16]
        return Path(f"{db_path}.ann-{digest}.npz")

    def synced(self, rev: int) -> None:
        """The owner refreshed the rows up to revision ``rev``; on the first call, saved ANN
        indexes of exactly that revision are restored (any other is ignored and rebuilt)."""
        first = self._synced_rev is None
        self._synced_rev = rev
        if first and self.persist_path is not None:
            self._restore(rev)

    def persist(self, rev: int) -> None:
        """Save the ANN indexes (if any, and if changed) as of revision ``rev``."""
        path = self.persist_path
        if path is None or rev == self._saved_rev:
            return
        if not self.ann:
            path.unlink(missing_ok=True)
            return
        if any(not isinstance(k, int) for k in self.keys[:1]):
            return
        names = {v: k for k, v in self.codes.items()}
        by_group = {gid: key for key, gid in self.groups.items()}
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, object] = {"version": _PERSIST_VERSION, "rev": rev, "dims": self.dims, "groups": []}
        for gid in list(self.ann):
            ann = self._ann_ready(gid)
            if ann is None:
                continue
            agent, user = by_group[gid]
            labels = np.flatnonzero(self.in_ann[: self.size] & (self.group[: self.size] == gid))
            i = len(meta["groups"])  # type: ignore[arg-type]
            meta["groups"].append({"agent": names[agent], "user": names[user], "trained_on": ann.trained_on,  # type: ignore[attr-defined]
                                   "kind": ann.kind})
            arrays[f"index{i}"] = ann.to_bytes()
            arrays[f"labels{i}"] = labels.astype(np.int64)
            arrays[f"keys{i}"] = np.asarray([self.keys[int(p)] for p in labels], dtype=np.int64)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as fh:
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
        self._saved_rev = rev

    def _restore(self, rev: int) -> None:
        path = self.persist_path
        if path is None or not path.exists():
            return
        try:
            with np.load(path) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                if meta.get("version") != _PERSIST_VERSION or meta.get("rev") != rev or meta.get("dims") != self.dims:
                    log.info("vector index: saved ANN indexes at %s are of another revision; rebuilt when needed", path)
                    return
                adopted = [self._restore_group(g, data[f"index{i}"], data[f"labels{i}"], data[f"keys{i}"])
                           for i, g in enumerate(meta["groups"])]
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            log.warning("vector index: saved ANN indexes at %s unreadable (%s); rebuilt when needed", path, exc)
            return
        if all(adopted):  # else a group rebuilt here must be saved again, though the revision is the same
            self._saved_rev = rev

    def _restore_group(self, meta: dict[str, object], data: np.ndarray, labels: np.ndarray, keys: np.ndarray) -> bool:
        """Adopt one saved group if its rows are exactly this group's live rows, under their new
        positions (and it holds the codes groups are built with now); False if not adopted."""
        agent, user = self.codes.get(str(meta["agent"])), self.codes.get(None if meta["user"] is None else str(meta["user"]))
        gid = self.groups.get((agent, user)) if agent is not None and user is not None else None
        if gid is None or keys.shape[0] != self.group_sizes[gid] or meta.get("kind") != AnnGroup.kind_for(self.dims):
            return False
        positions = [self.position.get(int(k)) for k in keys]
        if any(p is None or not self.live[p] or self.group[p] != gid for p in positions):
            return False
        ann = AnnGroup.from_bytes(data, int(meta["trained_on"]))  # type: ignore[call-overload]
        new = np.asarray(positions, dtype=np.int64)
        if ann.ntotal != new.shape[0] or not ann.relabel(dict(zip(labels.tolist(), new.tolist()))):
            return False
        probe = new[:: max(1, new.shape[0] // 16)]
        if not ann.finds(self.vectors[probe], probe):  # the labels do not match the rows
            return False
        self.ann[gid] = ann
        self.in_ann[new] = True
        return True

    # -- reload (MongoDB's periodic full reload of a cached partition) --
    def adopt_ann(self, old: VectorIndex | None) -> None:
        """Take over ``old``'s approximate indexes after a reload of the same rows into this
        index: rows are matched by key, rows gone or whose vector changed are dropped from
        them, rows they lack are queued to be added; ``old`` keeps none (it rebuilds if used)."""
        if old is None or old is self or old.dims != self.dims:
            return
        with old.lock:
            names = {v: k for k, v in old.codes.items()}
            taken = []
            for (agent, user), old_gid in old.groups.items():
                if old._ann_ready(old_gid) is not None:
                    labels = np.flatnonzero(old.in_ann[: old.size] & (old.group[: old.size] == old_gid))
                    taken.append((names[agent], names[user], old.ann.pop(old_gid), labels))
            old.in_ann[:] = False
            old_keys, old_vectors = old.keys, old.vectors
        for agent_name, user_name, ann, labels in taken:
            agent_code, user_code = self.codes.get(agent_name), self.codes.get(user_name)
            gid = self.groups.get((agent_code, user_code)) if agent_code is not None and user_code is not None else None
            if gid is None:
                continue
            new = np.fromiter((self.position.get(old_keys[int(p)], -1) for p in labels), dtype=np.int64, count=len(labels))
            ok = new >= 0
            ok[ok] = self.live[new[ok]] & (self.group[new[ok]] == gid)
            ok[ok] = (old_vectors[labels[ok]] == self.vectors[new[ok]]).all(axis=1)
            if not ok.all():
                ann.remove(labels[~ok])
            if not ann.relabel(dict(zip(labels[ok].tolist(), new[ok].tolist()))):
                continue
            self.ann[gid] = ann
            self.in_ann[new[ok]] = True
            n = self.size
            missing = np.flatnonzero(self.live[:n] & (self.group[:n] == gid) & ~self.in_ann[:n])
            if missing.size:
                with self._ann_lock:
                    self._ann_add.setdefault(gid, set()).update(missing.tolist())
