"""Congruence: the same corpus through MemoryEngine on the embedded store and on MongoDB gives
the same rankings.

* **Vector rankings are compared exactly** (same ids in the same order, scores equal to 1e-6),
  at the store level and through the engine with queries whose keyword lane is empty. Both
  stores keep float32 vectors and score ``(1 + cos) / 2`` exactly (no ANN on the self-hosted
  path), so nothing but floating-point summation order differs; adjacent scores closer than
  1e-6 may swap.
* **Hybrid rankings are compared by overlap of the top results.** The keyword lanes score
  differently by design: SQLite FTS5 ranks with BM25 (IDF-weighted, length-normalised, Porter
  stemming), MongoDB's ``$text`` with its textScore (term frequency with field weights, no IDF,
  Snowball stemming and its own stop-word list). The lanes agree on *which* rows match but not
  on their order, and RRF fuses ranks, so fused orders can differ while the same memories
  surface. The test requires every query's top-5 sets to overlap by at least 60%, each
  store's top hit to be in the other's top 5, and an average top-5 overlap of at least 80%
  (measured on this corpus: 98%, and the same top result for 21 or 22 of the 22 query/scope
  pairs depending on the lane weights).
* The engine's vector-only comparison turns off the lanes that run keyword queries (the
  keyword lane, and the entity lane, which looks up entities with a keyword query); the
  hybrid comparison runs the keyword and vector lanes; a last, looser check runs the
  default configuration with every lane.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest

from manowar_memory import FakeEmbedder, MemoryEngine, Scope, SQLiteStore
from manowar_memory.stores.base import MemoryQuery

pytestmark = [pytest.mark.mongo, pytest.mark.xdist_group("congruence")]

DAY = 86_400_000
T_BASE = 1_760_000_000_000

SHARED = [
    "The office closes at six on Fridays.",
    "The team uses Python and Rust for the backend services.",
    "Quarterly planning happens in the first week of January.",
    "Deploys to production need two approvals.",
    "The staging database is refreshed every Sunday night.",
    "Customer support tickets are answered within one business day.",
    "The design system uses a teal and orange palette.",
    "Incident reviews are blameless and written within a week.",
]
ALICE = [
    "Alice drinks green tea every morning before work.",
    "Alice is training for the Lisbon marathon in October.",
    "Alice prefers short TypeScript examples in answers.",
    "Alice has a dog named Rex who loves the beach.",
    "Alice is allergic to peanuts and avoids satay.",
    "Alice's sister lives in Porto and works as a doctor.",
    "Alice wants reminders about her dentist appointment.",
    "Alice reads science fiction novels on long flights.",
    "Alice plays the piano on weekends.",
    "Alice moved to a new apartment near the river in March.",
    "Alice is learning Portuguese with a tutor twice a week.",
    "Alice's laptop is a ten year old ThinkPad running Linux.",
]
BOB = [
    "Bob drinks double espresso and hates tea.",
    "Bob is planning a hiking trip to the Alps in July.",
    "Bob prefers detailed Python examples with type hints.",
    "Bob's cat is called Miso and sleeps all day.",
    "Bob manages the billing team and approves invoices.",
    "Bob plays guitar in a jazz band on Thursdays.",
]
FACTS = {
    "alice": ["Alice's favourite colour is teal.", "Alice works as a data engineer.",
              "Alice's birthday is on the ninth of May."],
    "bob": ["Bob's favourite food is ramen.", "Bob lives in Berlin."],
}
VECTOR_ONLY_QUERIES = [  # every term is a stop word: the keyword lane is empty, the vector lane decides
    "what about them?", "is it here?", "what did you do", "how would you do that again",
]
HYBRID_QUERIES = [
    "What does Alice drink in the morning?", "Which programming examples does the user prefer?",
    "Tell me about pets and animals", "Where does the family live?", "marathon training schedule",
    "python backend deploy approvals", "allergy food restrictions", "music instruments hobbies",
]


def _load(engine: MemoryEngine) -> None:
    agent = "agent-congruence"
    for i, text in enumerate(SHARED):
        engine.ingest(Scope(agent_wallet=agent), [{"content": text, "created_at": T_BASE - i * 3 * DAY}])
    for user, rows in (("alice", ALICE), ("bob", BOB)):
        scope = Scope(agent_wallet=agent, user_address=user)
        engine.ingest(scope, [{"content": t, "created_at": T_BASE - (i * 5 + 1) * DAY} for i, t in enumerate(rows)])
        for j, fact in enumerate(FACTS[user]):
            engine.remember(scope, fact, fact_type="preference", created_at=T_BASE - (j * 7 + 2) * DAY)


@pytest.fixture(scope="module")
def engines(mongo_client):
    """Both engines over the same corpus, loaded once (the tests only read)."""
    from manowar_memory.stores.mongo import MongoStore

    name = f"manowar_congruence_{uuid.uuid4().hex[:12]}"
    embedded = MemoryEngine(store=SQLiteStore(":memory:"), embedder=FakeEmbedder(64), extractor=None)
    mongo = MemoryEngine(store=MongoStore(client=mongo_client, database=name), embedder=FakeEmbedder(64),
                         extractor=None)
    try:
        _load(embedded)
        _load(mongo)
        yield embedded, mongo
    finally:
        embedded.close()
        mongo.close()
        mongo_client.drop_database(name)


def _same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]], tol: float = 1e-6) -> None:
    """Same scores in the same order and the same ids, except that rows whose scores are within
    ``tol`` may come in either order, and when such a tie straddles the result limit, which of the
    tied rows made the cut is arbitrary (both stores partition, then sort)."""
    assert len(a) == len(b)
    for (_, sa), (_, sb) in zip(a, b):
        assert sa == pytest.approx(sb, abs=tol)
    groups_a: list[set[str]] = []
    groups_b: list[set[str]] = []
    last = None
    for (ia, sa), (ib, _) in zip(a, b):
        if last is None or abs(sa - last) > tol:
            groups_a.append(set())
            groups_b.append(set())
        groups_a[-1].add(ia)
        groups_b[-1].add(ib)
        last = sa
    assert groups_a[:-1] == groups_b[:-1]
    assert len(groups_a[-1]) == len(groups_b[-1]) if groups_a else True


SCOPES = [
    Scope(agent_wallet="agent-congruence", user_address="alice"),
    Scope(agent_wallet="agent-congruence", user_address="bob", thread_id="t1"),
    Scope(agent_wallet="agent-congruence"),
]


@pytest.mark.parametrize("scope", SCOPES, ids=["alice", "bob", "shared"])
@pytest.mark.parametrize("filters,sources", [({}, None), ({}, ("fact",)), ({"metadata.factType": "preference"}, None)])
def test_store_vector_rankings_are_identical(engines, scope, filters, sources) -> None:
    """On both self-hosted MongoDB paths: the in-process vector cache and the streaming scan."""
    from manowar_memory.stores.mongo import MongoStore

    embedded, mongo = engines
    scan = MongoStore(client=mongo.store.client, database=mongo.store.database_name, vector_cache_bytes=0,
                      create_indexes=False)
    query = MemoryQuery(scope=scope, filters=filters, sources=sources)
    try:
        for text in VECTOR_ONLY_QUERIES + HYBRID_QUERIES:
            vector = embedded.embedder.embed([text], input_type="query")[0]
            a, info_a = embedded.store.vector_search(query, vector, embedded.model_id, 15)
            for store, method in ((mongo.store, "local-cache"), (scan, "local-scan")):
                b, info_b = store.vector_search(query, vector, mongo.model_id, 15)
                assert info_b.method == method
                assert info_a.candidates == info_b.candidates
                _same_ranking([(h.record.id, h.score) for h in a], [(h.record.id, h.score) for h in b])
    finally:
        scan.close()


@contextmanager
def _only_lanes(engines, keep: set[str]):
    """Give every lane not in ``keep`` weight 0 for the duration (restored afterwards)."""
    saved = [e.config.retrieval.lane_weights for e in engines]
    for e in engines:
        e.config.retrieval.lane_weights = {name: (w if name in keep else 0.0)
                                           for name, w in e.config.retrieval.lane_weights.items()}
    try:
        yield engines
    finally:
        for e, weights in zip(engines, saved):
            e.config.retrieval.lane_weights = weights


@pytest.fixture
def vector_only(engines):
    """Only the vector lane: lanes that run keyword queries (keyword, entity) get weight 0 (the
    entity lane looks entities up with a keyword query)."""
    with _only_lanes(engines, {"vector"}) as pair:
        yield pair


@pytest.fixture
def hybrid(engines):
    """The keyword and vector lanes (the entity lane, seeded from their fused top and fetched
    with another keyword query, compounds the keyword lanes' difference; see the last test)."""
    with _only_lanes(engines, {"keyword", "vector"}) as pair:
        yield pair


@pytest.mark.parametrize("scope", SCOPES, ids=["alice", "bob", "shared"])
def test_engine_vector_only_rankings_are_identical(vector_only, scope) -> None:
    embedded, mongo = vector_only
    for text in VECTOR_ONLY_QUERIES:
        a, _ = embedded.search(text, scope, k=10, decay=False)
        b, _ = mongo.search(text, scope, k=10, decay=False)
        assert all(set(c.lanes) <= {"vector"} for c in a + b)
        _same_ranking([(c.id, c.score) for c in a], [(c.id, c.score) for c in b])


@pytest.mark.parametrize("scope", SCOPES, ids=["alice", "bob", "shared"])
def test_engine_keyword_lanes_match_the_same_rows(engines, scope) -> None:
    embedded, mongo = engines
    query = MemoryQuery(scope=scope)
    for text in HYBRID_QUERIES:
        a = {h.record.id for h in embedded.store.keyword_search(query, text, 100)}
        b = {h.record.id for h in mongo.store.keyword_search(query, text, 100)}
        # the stemmers differ (Porter vs Snowball), so allow a one-row difference per query
        assert len(a ^ b) <= 1, (text, a ^ b)


def _overlaps(embedded: MemoryEngine, mongo: MemoryEngine, scope: Scope) -> list[tuple[str, float, bool]]:
    out = []
    for text in HYBRID_QUERIES:
        a, _ = embedded.search(text, scope, k=5)
        b, _ = mongo.search(text, scope, k=5)
        ids_a, ids_b = [c.id for c in a], [c.id for c in b]
        assert len(ids_a) == len(ids_b)
        if ids_a:
            out.append((text, len(set(ids_a) & set(ids_b)) / len(ids_a), ids_a[0] in ids_b and ids_b[0] in ids_a))
    return out


@pytest.mark.parametrize("scope", SCOPES, ids=["alice", "bob", "shared"])
def test_engine_hybrid_top_results_overlap(hybrid, scope) -> None:
    found = _overlaps(*hybrid, scope)
    assert found
    for text, overlap, tops in found:
        assert overlap >= 0.6 and tops, (text, overlap)  # each top hit is in the other's top 5
    assert sum(o for _, o, _ in found) / len(found) >= 0.8, found


@pytest.mark.parametrize("scope", SCOPES, ids=["alice", "bob", "shared"])
def test_engine_default_lanes_overlap(engines, scope) -> None:
    """With every lane of the default configuration (entity lane included) the stores still
    surface mostly the same memories."""
    found = _overlaps(*engines, scope)
    assert found and sum(o for _, o, _ in found) / len(found) >= 0.6, found


def test_pre_turn_prompts_agree(engines) -> None:
    embedded, mongo = engines
    scope = Scope(agent_wallet="agent-congruence", user_address="alice", thread_id="t1")
    for text in ("What does Alice drink in the morning?", "Tell me about the dog"):
        a = embedded.pre_turn(text, scope)
        b = mongo.pre_turn(text, scope)
        kept_a, kept_b = {i.id for i in a.items}, {i.id for i in b.items}
        assert len(kept_a & kept_b) >= max(1, len(kept_a) - 2), (text, a.prompt, b.prompt)
