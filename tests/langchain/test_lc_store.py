"""ManowarStore behaves as a LangGraph BaseStore: checked against LangGraph's own InMemoryStore
where the semantics are defined, plus semantic search on the engine (with and without vectors)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, ClassVar

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from langchain_manowar import ManowarStore
from manowar_memory import MemoryEngine, Scope

SCOPE = Scope(agent_wallet="agent-store", user_address="user-1")

NAMESPACES = [
    ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
    ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789"),
]


@pytest.fixture(params=["fake:256", None], ids=["vectors", "keyword-only"])
def engine(request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    engine = MemoryEngine(store="sqlite:///:memory:", embedder=request.param)
    yield engine
    engine.close()


@pytest.fixture
def store(engine: MemoryEngine) -> ManowarStore:
    return ManowarStore(engine=engine, scope=SCOPE)


def _fill(*stores: Any) -> None:
    for s in stores:
        for i, ns in enumerate(NAMESPACES):
            s.put(ns, f"id_{i}", {"data": f"value_{i:02d}", "n": i, "tags": ["x", str(i % 2)]})


def _keys(items: list[Any]) -> set[tuple[tuple[str, ...], str]]:
    return {(tuple(i.namespace), i.key) for i in items}


class TestAgainstInMemoryStore:
    LIST_CASES: ClassVar[list[dict[str, Any]]] = [
        {}, {"prefix": ("a", "b")}, {"suffix": ("f",)}, {"prefix": ("a",), "suffix": ("f",)},
        {"prefix": ("a",), "suffix": ("b", "f")}, {"prefix": ("a", "b"), "max_depth": 3},
        {"prefix": ("a", "*", "f")}, {"prefix": ("*", "*", "f")}, {"suffix": ("*", "f")},
        {"prefix": ("a", "b"), "suffix": ("d", "i")}, {"prefix": ("nonexistent",)}, {"max_depth": 1},
        {"limit": 3, "offset": 2}, {"max_depth": 2, "limit": 2, "offset": 1},
    ]

    @pytest.mark.parametrize("case", LIST_CASES, ids=[str(c) for c in LIST_CASES])
    def test_list_namespaces_matches(self, store: ManowarStore, case: dict[str, Any]) -> None:
        """list_namespaces gives exactly InMemoryStore's answer (prefix, suffix, wildcards, depth, paging)."""
        reference = InMemoryStore()
        _fill(store, reference)
        assert store.list_namespaces(**case) == reference.list_namespaces(**case)

    FILTERS: ClassVar[list[dict[str, Any] | None]] = [
        None, {"data": "value_03"}, {"n": {"$gte": 4}}, {"n": {"$gt": 2, "$lte": 6}}, {"n": {"$ne": 0}},
        {"tags": ["x", "1"]}, {"n": {"$lt": 3}, "tags": ["x", "0"]}, {"data": {"$eq": "value_07"}}, {"missing": "x"},
    ]

    @pytest.mark.parametrize("flt", FILTERS, ids=[str(f) for f in FILTERS])
    @pytest.mark.parametrize("prefix", [(), ("a",), ("a", "b"), ("users",)])
    def test_search_without_query_matches(self, store: ManowarStore, flt: dict[str, Any] | None,
                                          prefix: tuple[str, ...]) -> None:
        """Filtered listing under a prefix returns the same items as InMemoryStore."""
        reference = InMemoryStore()
        _fill(store, reference)
        got = store.search(prefix, filter=flt, limit=50)
        assert _keys(got) == _keys(reference.search(prefix, filter=flt, limit=50))
        assert all(i.score is None for i in got)

    def test_paging_covers_every_item_once(self, store: ManowarStore) -> None:
        """offset/limit pages partition the results (newest first)."""
        _fill(store)
        pages = [store.search(("a",), limit=2, offset=o) for o in range(0, 8, 2)]
        flat = [(tuple(i.namespace), i.key) for page in pages for i in page]
        assert len(flat) == len(set(flat)) == 5
        assert [len(p) for p in pages] == [2, 2, 1, 0]
        assert flat[0] == (("a", "c", "f"), "id_4")  # the newest first

    def test_batch_reads_see_the_state_before_the_writes(self, store: ManowarStore) -> None:
        """As in LangGraph's stores: reads act on the state before the batch; the last write to a key wins."""
        ns, key = ("a", "b", "c", "d", "e"), "thread"
        value = {"human": "What is the weather in SF?", "ai": "It's always sunny in SF."}
        put, delete, get = PutOp(ns, key, value), PutOp(ns, key, None), GetOp(ns, key)
        listing = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a", "b")), MatchCondition("suffix", ("d", "e"))))
        results = store.batch([put, get, listing, delete])
        assert results == [None, None, [], None]
        assert store.get(ns, key) is None
        results = store.batch([get, delete, put])
        assert results == [None, None, None] and store.get(ns, key) is not None
        results = store.batch([delete, get, listing])
        assert results[0] is None and isinstance(results[1], Item) and results[2] == [ns]
        assert store.get(ns, key) is None


class TestPerUserStoreAgainstInMemoryStore:
    """An agent-level store that reads the user from label 1 of each namespace (every item in its
    user's scope) answers every user-naming search and listing exactly as InMemoryStore does."""

    PREFIXES: ClassVar[list[tuple[str, ...]]] = [("a", "b"), ("a", "c"), ("b", "a"), ("users", "456"),
                                                 ("a", "b", "d"), ("admin", "users")]

    @pytest.fixture
    def per_user(self, engine: MemoryEngine) -> ManowarStore:
        return ManowarStore(engine=engine, scope=Scope(agent_wallet="agent-store"))

    @pytest.mark.parametrize("flt", [None, {"n": {"$gte": 2}}, {"tags": ["x", "1"]}], ids=str)
    @pytest.mark.parametrize("prefix", PREFIXES, ids=str)
    def test_search_matches(self, per_user: ManowarStore, prefix: tuple[str, ...], flt: dict[str, Any] | None) -> None:
        reference = InMemoryStore()
        _fill(per_user, reference)
        assert _keys(per_user.search(prefix, filter=flt, limit=50)) == _keys(reference.search(prefix, filter=flt,
                                                                                               limit=50))

    @pytest.mark.parametrize("case", [{"prefix": ("a", "b")}, {"prefix": ("a", "b"), "max_depth": 3},
                                      {"prefix": ("a", "b"), "suffix": ("d", "i")}, {"prefix": ("users", "123")},
                                      {"prefix": ("a", "b", "*", "e")}], ids=str)
    def test_list_namespaces_matches(self, per_user: ManowarStore, case: dict[str, Any]) -> None:
        reference = InMemoryStore()
        _fill(per_user, reference)
        assert per_user.list_namespaces(**case) == reference.list_namespaces(**case)

    def test_items_are_in_their_users_scope(self, per_user: ManowarStore, engine: MemoryEngine) -> None:
        _fill(per_user)
        assert {r.user_address for r in engine.list_items(Scope(agent_wallet="agent-store", user_address="b"))} == {
            "b"}
        assert len(engine.list_items(Scope(agent_wallet="agent-store", user_address="b"))) == 4
        assert engine.list_items(Scope(agent_wallet="agent-store")) == []


class TestItems:
    def test_put_get_update_delete(self, store: ManowarStore) -> None:
        """A put creates, a second put replaces the value (created_at kept), delete removes it."""
        ns = ("memories", "user-1")
        assert store.get(ns, "k") is None
        store.put(ns, "k", {"text": "User likes pizza", "n": 1})
        first = store.get(ns, "k")
        assert isinstance(first, Item) and first.value == {"text": "User likes pizza", "n": 1}
        assert first.namespace == ns and first.key == "k" and isinstance(first.created_at, datetime)
        store.put(ns, "k", {"text": "User likes sushi"})
        second = store.get(ns, "k")
        assert second is not None and second.value == {"text": "User likes sushi"}
        assert second.created_at == first.created_at and second.updated_at >= first.updated_at
        assert len(store.search(ns)) == 1
        store.delete(ns, "k")
        store.delete(ns, "k")  # deleting a missing key is fine
        assert store.get(ns, "k") is None
        assert store.engine.list_items(SCOPE, filters={"metadata.lg_kind": "item"}) == []

    def test_keys_are_exact_per_namespace(self, store: ManowarStore) -> None:
        """The same key in a namespace, a parent and a child are three items."""
        for ns in [("a",), ("a", "b"), ("a", "b", "c")]:
            store.put(ns, "same", {"at": "/".join(ns)})
        assert store.get(("a", "b"), "same").value == {"at": "a/b"}  # type: ignore[union-attr]
        assert len(store.search(("a",))) == 3 and len(store.search(("a", "b"))) == 2

    def test_values_round_trip(self, store: ManowarStore) -> None:
        """Nested, unicode and numeric values come back unchanged."""
        value = {"name": "Zoë ✓", "nested": {"list": [1, 2.5, None, True], "deep": {"k": "v"}}, "empty": {}}
        store.put(("docs",), "v", value)
        assert store.get(("docs",), "v").value == value  # type: ignore[union-attr]

    def test_invalid_namespaces_are_refused(self, store: ManowarStore) -> None:
        """Labels with dots or empty labels fail, even through batch; TTLs are not supported."""
        with pytest.raises(InvalidNamespaceError):
            store.put(("a.b",), "k", {"x": 1})
        with pytest.raises(InvalidNamespaceError):
            store.batch([GetOp(("a", ""), "k")])
        with pytest.raises(InvalidNamespaceError):
            store.put((), "k", {"x": 1})
        with pytest.raises(NotImplementedError):
            store.put(("a",), "k", {"x": 1}, ttl=5)

    def test_scopes_isolate_users(self, engine: MemoryEngine) -> None:
        """Two users' stores on one engine do not see each other's items."""
        mine = ManowarStore(engine=engine, scope=SCOPE)
        theirs = ManowarStore(engine=engine, scope=Scope(agent_wallet="agent-store", user_address="user-2"))
        mine.put(("prefs",), "k", {"text": "mine"})
        assert theirs.get(("prefs",), "k") is None
        assert theirs.list_namespaces() == []
        theirs.put(("prefs",), "k", {"text": "theirs"})
        assert mine.get(("prefs",), "k").value == {"text": "mine"}  # type: ignore[union-attr]

    def test_index_embed_is_refused(self, engine: MemoryEngine) -> None:
        """The engine embeds; an index['embed'] would be a second vector space and is refused."""
        with pytest.raises(ValueError, match="engine's embedder"):
            ManowarStore(engine=engine, scope=SCOPE, index={"embed": lambda texts: [[0.0] for _ in texts], "dims": 1})


class TestSemanticSearch:
    @pytest.fixture
    def store(self, engine: MemoryEngine) -> ManowarStore:
        return ManowarStore(engine=engine, scope=SCOPE, index={"fields": ["text"]})

    def _docs(self, store: ManowarStore) -> None:
        store.put(("docs",), "py", {"text": "Python tutorial for beginners", "kind": "guide"})
        store.put(("docs",), "ts", {"text": "TypeScript handbook and generics", "kind": "guide"})
        store.put(("docs",), "cook", {"text": "Pasta carbonara recipe", "kind": "recipe"})
        store.put(("other",), "py2", {"text": "Python internals deep dive", "kind": "guide"})

    def test_query_ranks_relevant_items_first(self, store: ManowarStore) -> None:
        """The best match comes first with a score; the other items follow unranked (score None)."""
        self._docs(store)
        results = store.search(("docs",), query="python tutorial", limit=10)
        assert results[0].key == "py" and results[0].score is not None and results[0].score > 0
        assert {r.key for r in results} == {"py", "ts", "cook"}  # never outside the prefix
        scores = [r.score for r in results]
        ranked = [s for s in scores if s is not None]
        assert scores[: len(ranked)] == ranked == sorted(ranked, reverse=True)  # ranked first, best first
        assert [r.score is None for r in results] == [False, True, True]  # nothing else shares a word

    def test_query_with_filter_and_without_fill(self, engine: MemoryEngine) -> None:
        """Filters apply to ranked hits; fill_unranked=False returns only what the search found."""
        store = ManowarStore(engine=engine, scope=SCOPE, index={"fields": ["text"]}, fill_unranked=False)
        self._docs(store)
        guides = store.search((), query="python", filter={"kind": "guide"})
        assert {r.key for r in guides} == {"py", "py2"} and all(r.score is not None for r in guides)
        assert store.search((), query="python", filter={"kind": "recipe"}) == []

    def test_index_fields_choose_the_searchable_text(self, engine: MemoryEngine) -> None:
        """Only the indexed fields are searchable; index=False items are never ranked but still listed."""
        store = ManowarStore(engine=engine, scope=SCOPE, index={"fields": ["title"]}, fill_unranked=False)
        store.put(("notes",), "n1", {"title": "quarterly budget", "body": "zeppelin"})
        store.put(("notes",), "n2", {"title": "zeppelin museum visit", "body": "budget"}, index=["body"])
        store.put(("notes",), "n3", {"title": "zeppelin budget"}, index=False)
        assert [r.key for r in store.search(("notes",), query="quarterly")] == ["n1"]
        assert {r.key for r in store.search(("notes",), query="budget")} == {"n1", "n2"}
        assert store.text_for({"title": "t", "body": "b"}) == "t"
        assert {r.key for r in store.search(("notes",))} == {"n1", "n2", "n3"}
        assert store.get(("notes",), "n3") is not None

    def test_keyword_only_engine_reports_itself(self) -> None:
        """Without an embedder the search still ranks (keyword lane) items."""
        engine = MemoryEngine(store="sqlite:///:memory:", embedder=None)
        try:
            store = ManowarStore(engine=engine, scope=SCOPE, fill_unranked=False)
            self._docs(store)
            assert [r.key for r in store.search(("docs",), query="carbonara")] == ["cook"]
        finally:
            engine.close()

    async def test_async_operations(self, store: ManowarStore) -> None:
        """aput / aget / asearch / alist_namespaces / adelete go through abatch."""
        await store.aput(("async", "ns"), "k1", {"text": "Async memory about violins"})
        await store.aput(("async", "ns"), "k2", {"text": "Another note about drums"})
        item = await store.aget(("async", "ns"), "k1")
        assert item is not None and item.value["text"] == "Async memory about violins"
        hits = await store.asearch(("async",), query="violins")
        assert hits[0].key == "k1" and hits[0].score is not None
        assert await store.alist_namespaces(prefix=("async",)) == [("async", "ns")]
        await store.adelete(("async", "ns"), "k1")
        assert await store.aget(("async", "ns"), "k1") is None
        results = await store.abatch([SearchOp(("async",)), GetOp(("async", "ns"), "k2")])
        assert [i.key for i in results[0]] == ["k2"] and isinstance(results[1], Item)  # type: ignore[union-attr]


class TestSharedItems:
    AGENT = Scope(agent_wallet="agent-store")

    def test_a_users_put_shadows_the_shared_item_and_never_changes_it(self, engine: MemoryEngine) -> None:
        """A put from a user's scope writes the user's own copy: the agent's shared item (and every
        other user's view of it) is unchanged."""
        shared = ManowarStore(engine=engine, scope=self.AGENT, user_position=None)
        mine = ManowarStore(engine=engine, scope=SCOPE)
        other = ManowarStore(engine=engine, scope=Scope(agent_wallet="agent-store", user_address="user-2"))
        shared.put(("policies",), "wifi", {"text": "The office wifi password is in the handbook."})
        assert mine.get(("policies",), "wifi").value["text"].startswith("The office wifi")  # type: ignore[union-attr]
        mine.put(("policies",), "wifi", {"text": "My home wifi password is hunter2."})
        assert mine.get(("policies",), "wifi").value == {"text": "My home wifi password is hunter2."}  # type: ignore[union-attr]
        for store in (shared, other):
            assert store.get(("policies",), "wifi").value == {  # type: ignore[union-attr]
                "text": "The office wifi password is in the handbook."}
            assert "hunter2" not in str([i.value for i in store.search(("policies",), query="wifi password")])
        assert [i.value["text"] for i in mine.search(("policies",))] == ["My home wifi password is hunter2."]
        assert len(engine.list_items(self.AGENT)) == 1  # the shared row is the agent's, untouched

    def test_a_users_delete_never_removes_the_shared_item(self, engine: MemoryEngine) -> None:
        """A delete from a user's scope removes only the user's own copy; the shared item shows through again."""
        shared = ManowarStore(engine=engine, scope=self.AGENT, user_position=None)
        mine = ManowarStore(engine=engine, scope=SCOPE)
        shared.put(("faq",), "hours", {"text": "Open 9 to 5."})
        mine.delete(("faq",), "hours")
        assert shared.get(("faq",), "hours") is not None
        assert mine.get(("faq",), "hours").value == {"text": "Open 9 to 5."}  # type: ignore[union-attr]
        mine.put(("faq",), "hours", {"text": "I work 10 to 6."})
        mine.delete(("faq",), "hours")
        assert mine.get(("faq",), "hours").value == {"text": "Open 9 to 5."}  # type: ignore[union-attr]
        assert shared.get(("faq",), "hours").value == {"text": "Open 9 to 5."}  # type: ignore[union-attr]

    def test_trust_is_the_applications(self, engine: MemoryEngine) -> None:
        """trust= sets the level of the rows the store writes; values cannot (they are data)."""
        store = ManowarStore(engine=engine, scope=SCOPE, trust="external")
        store.put(("web",), "page", {"text": "Some page", "trust": "system"})
        (row,) = engine.list_items(SCOPE)
        assert row.metadata["trust"] == "external" and store.get(("web",), "page").value["trust"] == "system"  # type: ignore[union-attr]
