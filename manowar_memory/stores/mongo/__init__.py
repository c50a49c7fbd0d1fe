"""The MongoDB store (``pip install "manowar-memory[mongo]"``).

Same collections, field names (camelCase, ``vectorId`` as the row id) and indexes as the
reference (``memory``, ``session_transcripts``, ``sessions`` with a TTL index on the BSON
Date ``expiresAt``, ``patterns``, ``archives``, ``skills``, ``memory_jobs``); every filter and
pipeline comes from the pure builders in :mod:`manowar_memory.stores._mql`.

Vector search, chosen by ``vector_search``:

* ``"atlas"``: ``$vectorSearch`` on the Atlas index ``vector_index`` (cosine; filter fields from
  the reference plus ``MEMORY_VECTOR_PREFILTER_FIELDS`` and ``embeddingModel``), then the full
  scope filter. Scores are Atlas's ``(1 + cos) / 2``. If the stage fails, the search is served
  by the local scan and the result's notes say so.
* ``"local"``: for self-hosted servers, which have no ``$vectorSearch``. The scope's candidate
  rows are streamed from the server newest first (``_id`` and the embedding only, in batches of
  ``scan_batch_size``) and scored exactly with numpy, keeping a running top-k, so memory stays
  bounded by one batch plus ``k`` whatever the corpus size. ``max_scan`` caps the rows scored
  per query (the newest are kept; the notes say when the cap cut the scan).
* ``"auto"`` (default): asks the server once whether it has Atlas Search (``$listSearchIndexes``)
  and uses ``atlas`` or ``local``; :attr:`MongoStore.vector_search_choice` says which and why.

The local path first tries the **in-process vector cache** (``VectorSearchInfo.method ==
"local-cache"``): per (agent, user, embedding model), a numpy matrix of those rows (a query
with a user reads its user's partition and the agent's user-less one and merges their top
rows), scored exactly like the scan (and like the embedded store). It stays in sync with
every writer without re-reading the corpus:

* every write through a ``MongoStore`` stamps the row's ``_syncAt`` (epoch ms); before each
  search the partition re-reads its (agent, user) rows stamped since its last sync minus
  ``vector_cache_lag_ms`` (default 2 s: it should exceed a write's time in flight and the
  clock skew between writers), projected to ``_id`` and the stamp, and fetches only the rows
  whose stamp changed: inserts, re-embeddings, status changes (soft delete, supersede) and
  moves to another model (dropped: models never mix). Rows written within the lag are
  re-checked on every search, so a longer lag costs a little on each search while writes
  are flowing;
* hard deletes leave nothing to read, so at most every ``vector_cache_recount_s`` (default
  1 s) the partition compares its row count with the server's (a count on the
  ``(agentWallet, userAddress, embeddingModel)`` index) and drops the ids that are gone or
  moved to another user (until then such a row can take a candidate slot but is never
  returned); more rows on the server than cached means an insert was missed (written without
  the stamp by another client, or in flight longer than the lag), and the partition is
  reloaded; every partition is also reloaded after ``vector_cache_reload_s`` (default 300 s),
  which bounds how long an update missed that way (a re-embedding) can go unseen;
* the top rows are fetched with the query's full scope filter, so a row changed after the
  sync is never returned out of scope.

Memory is bounded by ``vector_cache_bytes`` (default 256 MiB, ``0`` turns the cache off):
about ``4 * dims + 150`` bytes per cached row (at 384 dimensions ~1.7 KB, so ~160k rows; at
1024, ~64k). Least recently used partitions are evicted to make room; a partition that would
not fit alone is not cached, and its searches use the streaming scan with a note saying so.

One user's reads never touch other users' rows of the same agent: the text indexes (memory;
transcripts; transcript chunks) have ``(agentWallet, userAddress)`` as equality prefixes, so a
scope with a user runs one ``$text`` query for the user and one for the agent's user-less rows
and merges them by score (MongoDB's textScore depends on the document alone, so the merged list
is the one a single query over both would give); the vector cache, the vector scan, patterns,
archives and sessions read (agent, user) index ranges too, and so do ``list_memories`` and
``count_memories`` (``idx_vector_wallet_user_created``). Atlas's ``$vectorSearch`` is
prefiltered on the whole scope (agent, user or the agent's shared rows, mode, HAI).

Shard-ready: every by-id call names the row's agent (``agentWallet``, the shard key the docs
recommend) besides its id, and row ids are unique per agent (the unique index is
``(agentWallet, vectorId)``), so ``mongos`` routes each call of one scope to one shard.

Schema changes are named, ordered migrations (:data:`MIGRATIONS`), recorded in the
``_manowar_migrations`` collection as SQLite records its own; a store applies the pending ones
when it opens (:meth:`MongoStore.migrate`; two engines starting together take turns through a
lease). They create every index; on a database made by an earlier version they replace its
old text indexes (while one builds, text queries fail with a
:class:`~manowar_memory.errors.StoreError`) and its unique ``vectorId`` index. An engine of an
earlier version opening the same database would put old indexes back, so upgrade every engine
of a database together.

One active fact per (agent, factHash): the store derives ``activeFactHash`` on every write
(the hash while the row is an active fact, absent once it is superseded or deleted, so the
fact can be remembered again) and a partial unique index on ``(agentWallet, activeFactHash)``
makes :meth:`MongoStore.add_fact_if_absent` atomic: the duplicate-key error of a concurrent
insert becomes "reinforce the existing row". :meth:`MongoStore.migrate_active_facts` prepares
collections written before the index (pre-existing duplicates are kept, marked superseded).

Only rows whose ``embeddingModel`` equals the query's model are scored; rows of other models
are counted in ``VectorSearchInfo.skipped_other_models``.

Embeddings are stored as BSON ``BinData`` vectors (subtype 9, float32) rather than arrays of
doubles: 4 bytes per dimension instead of about 13 (each array element carries a type byte
and its index as a key), one ``numpy.frombuffer`` per batch instead of a Python float per
dimension when scanning, the same float32 precision as the embedded store (so both stores
rank identically), and Atlas Vector Search indexes this type natively. Rows written by the
reference (arrays of numbers) are still read and scored.

One module per role of :mod:`manowar_memory.stores.base` (the same split as the conformance
suite, :mod:`manowar_memory.testing.conformance`): :mod:`.rows`, :mod:`.threads`,
:mod:`.artifacts`, :mod:`.fences`, :mod:`.maintenance` and :mod:`.schedules` each hold one
mixin over the connection object of :mod:`.connection`; :class:`MongoStore` combines them.
The schema migrations are in :mod:`.migrations`.
"""

from __future__ import annotations

from .artifacts import MongoArtifacts
from .connection import DEFAULT_DATABASE, MIGRATION_LEASE_MS, VECTOR_SEARCH_MODES
from .fences import MongoCacheFences
from .maintenance import MongoMaintenance
from .migrations import MIGRATIONS
from .rows import MongoRows
from .schedules import MongoSchedules
from .threads import MongoThreads, join_transcript, pack_transcript, transcript_entries

__all__ = ["DEFAULT_DATABASE", "MIGRATIONS", "MIGRATION_LEASE_MS", "VECTOR_SEARCH_MODES", "MongoStore", "join_transcript",
           "pack_transcript", "transcript_entries"]


class MongoStore(MongoRows, MongoThreads, MongoArtifacts, MongoCacheFences, MongoMaintenance, MongoSchedules):
    """MongoDB backend of the :class:`~manowar_memory.stores.base.Store` protocol.

    ``MongoStore("mongodb://127.0.0.1:27017/?replicaSet=rs0")`` or
    ``MongoStore(client=pymongo.MongoClient(...), database="memory")``.

    * ``database``: explicit name, else the URI's path, else ``"manowar_memory"``.
    * ``vector_search``: ``"auto"`` (default), ``"atlas"`` or ``"local"`` (see the module doc).
    * ``max_scan``: most rows the local path scores per query (None: no cap).
    * ``scan_batch_size``: rows per batch of the streaming scan and of cache loads.
    * ``vector_cache_bytes``, ``vector_cache_lag_ms``, ``vector_cache_recount_s``,
      ``vector_cache_reload_s``: the in-process vector cache of the local path (see the module doc; 0 bytes turns it off).
    * ``prefilter_fields``: fields pushed into the ``$vectorSearch`` prefilter
      (default ``MEMORY_VECTOR_PREFILTER_FIELDS``, else ``agentWallet``).
    * ``min_vector_score``: optional server-side score threshold on Atlas's scale.
    * ``transcript_chunk_bytes``: a transcript is stored in chunks of at most this many bytes
      of messages (default 4 MiB): its newest chunk in the ``session_transcripts`` document,
      the older, sealed ones in ``session_transcript_chunks``, so a transcript of any length
      stays under MongoDB's 16 MB document limit. Reads put the messages back together.
    * ``create_indexes``: apply the pending schema migrations (:meth:`migrate`, which create
      the indexes) on open (default True).
    * ``client_options``: passed to :class:`pymongo.MongoClient` when the store creates it.
    """
