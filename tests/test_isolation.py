"""Tenant isolation as an attacker would test it: generated scopes, every entry point, both stores.

Hypothesis generates scopes (agents, users, threads, modes, HAIs, with unicode, case and
whitespace variants that collide on purpose). Each scope writes a distinct secret through one
entry point (the engine, the scoped surface, every LangChain and LlamaIndex class, the tools),
round-robin, then every scope reads through the read entry points, round-robin, and also asks
by name for the keys, ids and nodes of its own secret and of ``ASKED_BY_NAME - 1`` other scopes
of its example (a different set for each reader, so every secret is asked for by several
strangers). Every secret a read returns must be one its
scope may see (:func:`manowar_memory.scoped.visible`; the exact thread for thread readers), and
every scope must find its own secret again (no lost writes).

``MANOWAR_ISOLATION_SCOPES`` sets how many scopes a store gets (default 10,000), spread over
``SHARDS`` tests per store (each with an engine of its own and its own generated examples) so a
parallel run (pytest-xdist) checks them side by side; every scope of a store is still checked.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from manowar_memory import MemoryConfig, MemoryEngine, Scope
from manowar_memory.scoped import visible

pytest.importorskip("langchain_manowar")
pytest.importorskip("llama_index_manowar")

from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from langchain_manowar import (
    ManowarChatMessageHistory,
    ManowarMemoryMiddleware,
    ManowarRetriever,
    ManowarStore,
    ManowarVectorStore,
    create_manowar_tools,
)
from langchain_manowar import ManowarMemory as LCMemory
from llama_index_manowar import ManowarMemory as LIMemory
from llama_index_manowar import ManowarMemoryBlock, ManowarToolSpec
from llama_index_manowar import ManowarRetriever as LIRetriever
from llama_index_manowar import ManowarVectorStore as LIVectorStore

SCOPES_PER_STORE = int(os.environ.get("MANOWAR_ISOLATION_SCOPES", "10000"))
PER_EXAMPLE = 50
ASKED_BY_NAME = 8  # a reader's own keys and those of 7 others of its example, asked for by name
SHARDS = 8
EXAMPLES_PER_SHARD = -(-SCOPES_PER_STORE // (PER_EXAMPLE * SHARDS))
SECRET = re.compile(r"zq[0-9a-f]{16}")
QUERY = "zqsecret password"

# ---------------------------------------------------------------- generated scopes

_AGENT = st.sampled_from(["agent", "Agent", "AGENT", " agent", "agent\t", "agënt", "age\u0301nt", "ａgent", "agent\u200b"])
_USER = st.sampled_from([None, "alice", "Alice", " alice ", "ALICE", "álice", "alice\u200d", "bob", "0xAbC9", "0xabc9",
                         "用户", "مستخدم", "🙂"])
_THREAD = st.sampled_from([None, "t1", "T1", " t1", "thread-é", "🧵", "t 1", "t1:u:alice", "t1:u:Alice", "main"])
_HAI = st.sampled_from(["h1", "H1", " h1", "h2", "hä"])


@st.composite
def scope_specs(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from([None, "global", "local"]))
    return {"agent": draw(_AGENT), "user": draw(_USER), "thread": draw(_THREAD), "mode": mode,
            "hai": draw(_HAI) if mode == "local" else draw(st.sampled_from([None, None, "h1"])) if mode else None}


def build_scope(spec: dict[str, Any], token: str) -> Scope:
    agent = spec["agent"].replace("agent", f"agent{token}").replace("Agent", f"Agent{token}")
    agent = agent if token in agent else agent + token
    return Scope(agent_wallet=agent, user_address=spec["user"], thread_id=spec["thread"], mode=spec["mode"],
                 hai_id=spec["hai"])


# ---------------------------------------------------------------- entry points


@dataclass
class Written:
    """One secret and where it went."""

    secret: str
    scope: Scope
    entry: str
    thread_only: bool
    keys: dict[str, str] = field(default_factory=dict)


def _threaded(scope: Scope) -> Scope:
    return scope if scope.thread_id is not None else scope.with_thread("main")


def _lc_tools(engine: MemoryEngine, scope: Scope) -> dict[str, Any]:
    return {t.name: t for t in create_manowar_tools(engine, scope)}


def _li_tools(engine: MemoryEngine, scope: Scope) -> dict[str, Any]:
    return {t.metadata.name: t for t in ManowarToolSpec(engine=engine, scope=scope).to_tool_list()}


def _text(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False) if not isinstance(value, str) else value


# writers: (name, thread_only, fn(engine, scope, text, key) -> keys to read back)
def w_engine_remember(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    return {"row": e.remember(s, text).id}


def w_scoped_add(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    return {"row": e.scoped(s).add([text])[0]}


def w_engine_post_turn(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    e.post_turn(_threaded(s), [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}])
    return {}


def w_lc_memory(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    LCMemory(engine=e, scope=_threaded(s)).save_context({"input": text}, {"output": "ok"})
    return {}


def w_lc_history(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    ManowarChatMessageHistory(engine=e, scope=_threaded(s)).add_messages([HumanMessage(text), AIMessage("ok")])
    return {}


def w_lc_middleware(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    ManowarMemoryMiddleware(engine=e, scope=_threaded(s)).after_model(
        {"messages": [HumanMessage(text), AIMessage("ok")]}, None)  # type: ignore[arg-type]
    return {}


def w_lc_store(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    ManowarStore(engine=e, scope=s, user_position=None).put(("notes",), key, {"text": text})
    return {"lg": key}


def w_lc_vectorstore(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    return {"lcdoc": ManowarVectorStore(engine=e, scope=s).add_texts([text], ids=[key])[0]}


def w_lc_tool(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    out = json.loads(_lc_tools(e, s)["memory_remember"].invoke({"content": text}))
    return {"row": out["id"]}


def w_li_block(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    from llama_index.core.memory import Memory

    memory = Memory.from_defaults(session_id=f"s{key}", memory_blocks=[ManowarMemoryBlock(engine=e, scope=_threaded(s))])
    memory.put_messages([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="ok")])
    memory.get()
    return {}


def w_li_memory(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    memory = LIMemory(engine=e, scope=_threaded(s))
    memory.put_messages([ChatMessage(role="user", content=text), ChatMessage(role="assistant", content="ok")])
    return {}


def w_li_vectorstore(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    node = TextNode(id_=key, text=text)
    LIVectorStore(engine=e, scope=s).add([node])
    return {"node": key}


def w_li_tool(e: MemoryEngine, s: Scope, text: str, key: str) -> dict[str, str]:
    out = _li_tools(e, s)["memory_remember"].call(content=text)
    return {"row": json.loads(out.content)["id"]}


WRITERS: list[tuple[str, bool, Callable[[MemoryEngine, Scope, str, str], dict[str, str]]]] = [
    ("engine.remember", False, w_engine_remember), ("scoped.add", False, w_scoped_add),
    ("engine.post_turn", False, w_engine_post_turn), ("lc.memory", False, w_lc_memory),
    ("lc.chat_history", False, w_lc_history), ("lc.middleware", False, w_lc_middleware),
    ("lc.store", False, w_lc_store), ("lc.vector_store", False, w_lc_vectorstore), ("lc.tools", False, w_lc_tool),
    ("li.memory_block", False, w_li_block), ("li.memory", False, w_li_memory),
    ("li.vector_store", False, w_li_vectorstore), ("li.tools", False, w_li_tool),
]


# readers: (name, thread_only, fn(engine, scope, the secrets it asks for by name) -> texts)
def r_engine_search(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    cands, _ = e.search(QUERY, s, layers=("working", "scene", "graph", "patterns", "archives", "vectors"), k=200)
    return [c.text for c in cands]


def r_engine_items(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    out = [r.content for r in e.list_items(s, limit=500)]
    for item in w:
        for kind, value in item.keys.items():
            if kind == "row":
                with contextlib.suppress(KeyError):
                    out.append(e.get_item(s, value).content)
    return out


def r_engine_pre_turn(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    return [e.pre_turn(QUERY, s, budget_chars=20_000, max_items=100, max_item_chars=400).prompt]


def r_lc_memory(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    return [_text(LCMemory(engine=e, scope=_threaded(s)).load_memory_variables({"input": QUERY}))]


def r_lc_history(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    return [m.text for m in ManowarChatMessageHistory(engine=e, scope=_threaded(s)).messages]


def r_lc_middleware(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    from langchain.agents.middleware import ModelRequest, ModelResponse

    seen: list[str] = []

    def handler(request: ModelRequest) -> ModelResponse:
        seen.append(_text(request.system_message.content if request.system_message else ""))
        return ModelResponse(result=[AIMessage("ok")])

    request = ModelRequest(model=None, messages=[HumanMessage(QUERY)], system_message=None, tools=[],  # type: ignore[arg-type]
                           state={"messages": []}, runtime=None)  # type: ignore[arg-type]
    ManowarMemoryMiddleware(engine=e, scope=_threaded(s)).wrap_model_call(request, handler)
    return seen


def r_lc_store(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    store = ManowarStore(engine=e, scope=s, user_position=None)  # the explicit scope owns every namespace
    out = [_text(i.value) for i in store.search(("notes",), query=QUERY, limit=200)]
    out += [_text(i.value) for i in store.search(("notes",), limit=500)]
    for item in w:
        if "lg" in item.keys:
            got = store.get(("notes",), item.keys["lg"])
            if got is not None:
                out.append(_text(got.value))
    return out


def r_lc_retriever(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    docs = ManowarRetriever(engine=e, scope=s, k=200, layers=("working", "scene", "graph", "vectors")).invoke(QUERY)
    return [d.page_content for d in docs]


def r_lc_vectorstore(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    vs = ManowarVectorStore(engine=e, scope=s)
    out = [d.page_content for d in vs.similarity_search(QUERY, k=200)]
    out += [d.page_content for d in vs.max_marginal_relevance_search(QUERY, k=50, fetch_k=200)]
    ids = [item.keys["lcdoc"] for item in w if "lcdoc" in item.keys]
    out += [d.page_content for d in vs.get_by_ids(ids)]
    return out


def _tool_reads(call: Callable[[str, dict[str, Any]], str], w: list[Written]) -> list[str]:
    out = [call("memory_search", {"query": QUERY, "k": 50}), call("memory_list", {"limit": 200}),
           call("memory_context", {"query": QUERY, "budget_chars": 20_000})]
    for item in w:
        if "row" in item.keys:
            out.append(call("memory_get", {"memory_id": item.keys["row"]}))
    return out


def r_lc_tools(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    tools = _lc_tools(e, s)
    return _tool_reads(lambda name, args: _text(tools[name].invoke(args)), w)


def r_li_tools(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    tools = _li_tools(e, s)
    return _tool_reads(lambda name, args: _text(tools[name].call(**args).content), w)


def r_li_retriever(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    nodes = LIRetriever(engine=e, scope=s, similarity_top_k=200,
                        layers=("working", "scene", "graph", "vectors")).retrieve(QUERY)
    return [n.node.get_content() for n in nodes]


def r_li_block(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    import asyncio

    block = ManowarMemoryBlock(engine=e, scope=_threaded(s))
    return [_text(asyncio.run(block.aget([ChatMessage(role="user", content=QUERY)])))]


def r_li_memory(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    memory = LIMemory(engine=e, scope=_threaded(s))
    return [_text([m.content for m in memory.get(input=QUERY)]), _text([m.content for m in memory.get_all()])]


def r_li_vectorstore(e: MemoryEngine, s: Scope, w: list[Written]) -> list[str]:
    vs = LIVectorStore(engine=e, scope=s)
    query = VectorStoreQuery(query_str=QUERY, similarity_top_k=200)
    out = [n.get_content() for n in (vs.query(query).nodes or [])]
    ids = [item.keys["node"] for item in w if "node" in item.keys]
    out += [n.get_content() for n in vs.get_nodes(node_ids=ids)]
    return out


READERS: list[tuple[str, bool, Callable[[MemoryEngine, Scope, list[Written]], list[str]]]] = [
    ("engine.search", False, r_engine_search), ("engine.items", False, r_engine_items),
    ("engine.pre_turn", False, r_engine_pre_turn), ("lc.memory", False, r_lc_memory),
    ("lc.chat_history", True, r_lc_history), ("lc.middleware", False, r_lc_middleware),
    ("lc.store", False, r_lc_store), ("lc.retriever", False, r_lc_retriever),
    ("lc.vector_store", False, r_lc_vectorstore), ("lc.tools", False, r_lc_tools),
    ("li.retriever", False, r_li_retriever), ("li.memory_block", False, r_li_block),
    ("li.memory", False, r_li_memory), ("li.vector_store", False, r_li_vectorstore), ("li.tools", False, r_li_tools),
]

# what each writer's own scope reads to find its secret again
OWN_READ = {"lc.chat_history": "lc.chat_history", "li.memory": "li.memory", "lc.store": "lc.store",
            "lc.vector_store": "lc.vector_store", "li.vector_store": "li.vector_store"}


def _asked(written: list[Written], i: int) -> list[Written]:
    """What reader ``i`` asks for by name: its own secret and ``ASKED_BY_NAME - 1`` others of the
    example, a stride of 7 apart (7 and 50 are coprime, so each secret is asked for by 7 readers)."""
    n = len(written)
    return [written[i]] + [written[(i + 1 + 7 * j) % n] for j in range(min(ASKED_BY_NAME, n) - 1)]


def _may_see(reader: Scope, item: Written, thread_reader: bool) -> bool:
    if not visible(reader, item.scope):
        return False
    if thread_reader:
        return _threaded(reader).thread_id == _threaded(item.scope).thread_id and (
            reader.user_address, reader.mode, reader.hai_id) == (item.scope.user_address, item.scope.mode,
                                                                  item.scope.hai_id)
    return True


# ---------------------------------------------------------------- the run


@dataclass
class Tally:
    """Counts over one store's run."""

    scopes: int = 0
    writes: dict[str, int] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    secrets_seen: int = 0
    leaks: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def _engine(kind: str, request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    """SQLite with the in-process query cache on; MongoDB with the Redis cache (embeddings and
    query results), as production runs it: a cached result must never cross scopes either.
    Single-tenant, so that user-less scopes record conversations too (a multi-user engine refuses
    them: tests/test_tenancy.py) and their isolation from other agents, modes and HAIs is checked."""
    if kind == "sqlite":
        eng = MemoryEngine(store="sqlite:///:memory:", embedder="fake", extractor=None,
                           config=MemoryConfig(query_cache=True, single_tenant=True))
        yield eng
        eng.close()
        return
    from manowar_memory.cache.redis import RedisCache
    from manowar_memory.stores.mongo import MongoStore

    client = request.getfixturevalue("mongo_client")
    redis_url = request.getfixturevalue("redis_url")
    name = f"manowar_iso_{uuid.uuid4().hex[:12]}"
    cache = RedisCache(redis_url, prefix=f"manowar-test:{name}:")
    eng = MemoryEngine(store=MongoStore(client=client, database=name), embedder="fake", extractor=None, cache=cache,
                       config=MemoryConfig(single_tenant=True))
    yield eng
    eng.close()
    client.drop_database(name)
    keys = list(cache.client.scan_iter(match=f"manowar-test:{name}:*", count=1000))
    if keys:
        cache.client.delete(*keys)


@pytest.fixture(params=["sqlite", pytest.param("mongo", marks=[pytest.mark.mongo, pytest.mark.redis])])
def engine(request: pytest.FixtureRequest) -> Iterator[MemoryEngine]:
    yield from _engine(request.param, request)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_scope_reads_another_scopes_secret_through_any_entry_point(engine: MemoryEngine, shard: int) -> None:
    tally = Tally()
    registry: dict[str, Written] = {}
    counter = itertools.count()

    @settings(max_examples=EXAMPLES_PER_SHARD, deadline=None, database=None, derandomize=False,
              phases=[Phase.explicit, Phase.generate],  # no shrinking: a failing example lists its leaks
              suppress_health_check=list(HealthCheck))
    @given(specs=st.lists(scope_specs(), min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def run(specs: list[dict[str, Any]]) -> None:
        example = next(counter)
        token = f"-{shard}{example:05d}"
        written: list[Written] = []
        for i, spec in enumerate(specs):
            scope = build_scope(spec, token)
            name, thread_only, write = WRITERS[(example + i) % len(WRITERS)]
            secret = f"zq{uuid.uuid4().hex[:16]}"
            text = f"The zqsecret password of this tenant is {secret}."
            keys = write(engine, scope, text, f"k{example}x{i}")
            item = Written(secret, scope, name, thread_only, keys)
            registry[secret] = item
            written.append(item)
            tally.writes[name] = tally.writes.get(name, 0) + 1
            tally.scopes += 1
        for i, item in enumerate(written):
            asked = _asked(written, i)
            picks = {READERS[(example + i) % len(READERS)][0], OWN_READ.get(item.entry, "engine.items")}
            for name, thread_reader, read in READERS:
                if name not in picks:
                    continue
                found = set(SECRET.findall("\n".join(read(engine, item.scope, asked))))
                tally.reads[name] = tally.reads.get(name, 0) + 1
                tally.secrets_seen += len(found)
                for secret in found:
                    owner = registry.get(secret)
                    if owner is None or not _may_see(item.scope, owner, thread_reader):
                        tally.leaks.append(f"{name} in {item.scope.as_dict()} read {secret} of "
                                           f"{owner.scope.as_dict() if owner else '?'} (written by {owner and owner.entry})")
                if name == OWN_READ.get(item.entry, "engine.items") and item.secret not in found:
                    tally.lost.append(f"{item.entry} in {item.scope.as_dict()} lost {item.secret} ({name})")
        assert not tally.leaks, tally.leaks[:5]
        assert not tally.lost, tally.lost[:5]

    run()
    print(f"\nisolation: {tally.scopes} scopes, writes {tally.writes}, reads {tally.reads}, "
          f"{tally.secrets_seen} secrets returned, {len(tally.leaks)} leaks, {len(tally.lost)} lost writes")
    assert tally.scopes * SHARDS >= SCOPES_PER_STORE
    assert set(tally.writes) == {w[0] for w in WRITERS} and set(tally.reads) == {r[0] for r in READERS}
    assert tally.secrets_seen > tally.scopes  # reads do return secrets: the check above can fail
