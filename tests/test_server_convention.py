"""One REST convention on a real `manowar serve`: camelCase response bodies on every route, one
status (400, a problem document) for every malformed request, no route shadowing another, and
/docs and /redoc that render from the app's own assets with the network off."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

pytest.importorskip("fastapi")

from test_docs import _chromium
from test_server import KEY_A, KEY_ALICE, client, serve_on_store

pytestmark = pytest.mark.xdist_group("server-convention")

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")
#: keys whose value is user data, or a map keyed by data (layer names, lanes, reasons, checks), not by field names
DATA_MAPS = {"metadata", "totals", "omitted", "lanes", "timingsMs", "stored", "queued", "checks", "decisions"}


@pytest.fixture(scope="module")
def base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_on_store(request, tmp_path_factory.mktemp("convention"), kind="sqlite",
                              args=("--agent-jobs",))


def snake_keys(value: Any, path: str = "") -> list[str]:
    """Every snake_case key of ``value`` (JSON), with its path, outside user data and data-keyed maps."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if SNAKE.match(str(key)):
                found.append(f"{path}.{key}")
            if key not in DATA_MAPS:
                found += snake_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += snake_keys(item, f"{path}[{i}]")
    return found


def test_every_response_body_is_camel_case(base_url: str) -> None:
    a = client(base_url, KEY_A)
    alice = client(base_url, KEY_ALICE)
    thread = f"t-{uuid.uuid4().hex[:6]}"
    responses: dict[str, httpx.Response] = {}
    remembered = a.post("/api/memory/remember", json={"content": "The user prefers green tea", "factType": "preference",
                                                      "metadata": {"my_key": 1}})
    responses["remember"] = remembered
    fact = remembered.json()["id"]
    responses["record"] = alice.post("/api/memory/turns/record", json={"threadId": thread, "messages": [
        {"role": "user", "content": "I am planning a trip to Lisbon"}], "extractFacts": False})
    responses["assemble"] = a.post("/api/memory/context/assemble", json={"query": "tea", "explain": True})
    responses["loop"] = alice.post("/api/memory/loop", json={"threadId": thread, "query": "Lisbon", "extractFacts": False,
                                                             "messages": [{"role": "user", "content": "in May"}]})
    responses["search"] = a.post("/api/memory/items/search", json={"query": "green tea"})
    responses["get"] = a.get(f"/api/memory/items/{fact}")
    responses["patch"] = a.patch(f"/api/memory/items/{fact}", json={"confidence": 0.9})
    responses["resolve"] = a.post(f"/api/memory/conflicts/{fact}/resolve", json={"resolution": "keep"})
    responses["job"] = a.post("/api/memory/jobs", json={"type": "decay_update", "dryRun": True})
    responses["job_get"] = a.get(f"/api/memory/jobs/{responses['job'].json()['jobId']}")
    responses["schedules"] = a.post("/api/memory/schedules", json={"jobTypes": ["decay_update"]})
    responses["vector_search"] = a.post("/api/memory/vector-search", json={"query": "tea"})
    responses["transcript"] = alice.get(f"/api/memory/transcript-get/{thread}")
    responses["working"] = alice.get(f"/api/memory/sessions/{thread}/working")
    responses["list"] = a.get("/api/memory/agent-a")
    responses["delete"] = a.delete(f"/api/memory/items/{fact}")
    responses["forget"] = alice.post("/api/memory/forget", json={})
    for name, r in responses.items():
        assert r.status_code == 200, (name, r.text)
        assert snake_keys(r.json()) == [], (name, r.json())
    body = responses["remember"].json()
    assert body["factType"] == "preference" and "fact_type" not in body
    assert "contextUsage" in responses["assemble"].json() and "context_usage" not in responses["assemble"].json()
    assert responses["record"].json()["threadId"] == thread
    assert responses["loop"].json()["recorded"]["threadId"] == thread
    assert "createdAt" in responses["search"].json()["memories"][0]
    assert "archivesRewritten" in responses["forget"].json()
    assert responses["delete"].json()["memoryId"] == fact
    assert responses["schedules"].json()["schedules"][0]["schedule"]["jobType"] == "decay_update"
    # requests still take the snake_case names they took
    r = a.post("/api/memory/remember", json={"content": "The user's cat is called Miso", "fact_type": "identity"})
    assert r.status_code == 200 and r.json()["factType"] == "identity"


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _snake_properties(doc: dict[str, Any], schema: dict[str, Any], seen: set[str], path: str) -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name in seen:
            return []
        seen.add(name)
        return _snake_properties(doc, _resolve(doc, schema), seen, name)
    found = [f"{path}.{p}" for p in schema.get("properties", {}) if SNAKE.match(p)]
    for key, sub in schema.get("properties", {}).items():
        if key not in DATA_MAPS:
            found += _snake_properties(doc, sub, seen, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _snake_properties(doc, schema[key], seen, path)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += _snake_properties(doc, sub, seen, path)
    return found


def test_the_openapi_document_declares_camel_case_responses_and_one_validation_status(base_url: str) -> None:
    doc = httpx.get(f"{base_url}/openapi.json").json()
    snake: list[str] = []
    statuses: set[str] = set()
    declared = 0
    for path, item in doc["paths"].items():
        for method, op in item.items():
            statuses.update(op["responses"])
            for code, response in op["responses"].items():
                for content in response.get("content", {}).values():
                    declared += code == "200" and "$ref" in content["schema"]
                    snake += [f"{method.upper()} {path} {code}: {p}"
                              for p in _snake_properties(doc, content["schema"], set(), "")]
    assert snake == []
    assert declared >= 10  # the typed responses were walked
    assert "422" not in statuses and "400" in statuses
    assert "HTTPValidationError" not in doc["components"]["schemas"]


#: routes that answer a tool's result, and the tool
TOOL_ROUTES = {("post", "/api/memory/items/search"): "memory_search", ("get", "/api/memory/items/{memoryId}"): "memory_get",
               ("patch", "/api/memory/items/{memoryId}"): "memory_update",
               ("delete", "/api/memory/items/{memoryId}"): "memory_delete",
               ("post", "/api/memory/conflicts/{memoryId}/resolve"): "memory_resolve_conflict",
               ("post", "/api/memory/archives/{archiveId}/sync"): "memory_archive_pin",
               ("post", "/api/memory/patterns/{patternId}/validate"): "memory_validate_pattern",
               ("post", "/api/memory/patterns/{patternId}/promote"): "memory_promote_pattern",
               ("get", "/api/memory/skills"): "memory_list_skills", ("get", "/api/memory/skills/{skillId}"): "memory_get_skill",
               ("post", "/api/memory/search"): "memory_search", ("post", "/api/memory/layers/search"): "memory_search",
               ("get", "/api/memory/{agentWallet}"): "memory_list"}


def test_routes_answering_a_tool_result_declare_its_typed_camel_case_schema(base_url: str) -> None:
    from pydantic.alias_generators import to_camel

    from manowar_memory.tools import TOOL_GROUPS, catalog

    models = {d.name: d.result_model for d in catalog(TOOL_GROUPS)}
    doc = httpx.get(f"{base_url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for (method, path), name in TOOL_ROUTES.items():
        schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        declared = schemas[schema["$ref"].rsplit("/", 1)[1]]
        model = models[name]
        assert set(declared["properties"]) == {to_camel(f) for f in model.model_fields}, (method, path)
        assert sorted(declared.get("required", [])) == sorted(
            to_camel(f) for f, info in model.model_fields.items() if info.is_required()), (method, path)
    hit = schemas["MemoryHit"]["properties"]
    assert "rankScore" in hit and "createdAt" in hit and "rank_score" not in hit
    # a real answer conforms to the declared schema
    a = client(base_url, KEY_A)
    assert a.post("/api/memory/remember", json={"content": "The user keeps bees"}).status_code == 200
    found = a.post("/api/memory/items/search", json={"query": "bees"})
    assert found.status_code == 200, found.text
    assert found.json()["memories"], found.text
    jsonschema.validate(found.json(), {"$ref": "#/components/schemas/SearchResult", "components": doc["components"]})


MALFORMED = {
    "malformed JSON": b'{"content": "tea',
    "wrong type": b'{"content": 5}',
    "empty content": b'{"content": "   "}',
    "missing field": b'{"factType": "preference"}',
    "unknown field": b'{"content": "tea", "colour": "red"}',
    "no body": b"",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("path", ["/api/memory/remember", "/api/memory/context/assemble"])
def test_every_malformed_request_is_a_400_problem(base_url: str, path: str, case: str) -> None:
    body = MALFORMED[case]
    if path.endswith("assemble"):
        body = body.replace(b'"content"', b'"query"')
    r = client(base_url, KEY_A).post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, (case, r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["status"] == 400 and problem["title"] == "Bad Request" and problem["detail"], problem


def test_no_route_shadows_another_and_items_read_scope_alike(base_url: str) -> None:
    """Every (method, path) of the API is declared once, no literal path is also matched by a
    templated path of the same method declared before it, and every verb of /items/{memoryId}
    takes the scope fields from the query string (a PATCH also from its body)."""
    doc = httpx.get(f"{base_url}/openapi.json").json()
    ops = [(method, path) for path, item in doc["paths"].items() for method in item]
    assert len(ops) == len(set(ops))
    for i, (method, path) in enumerate(ops):
        for earlier_method, earlier in ops[:i]:
            if earlier_method != method or "{" not in earlier:
                continue
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", earlier) + "$"
            assert not re.match(pattern, path), f"{method.upper()} {path} is shadowed by {earlier}"
    scope_fields = {"agentWallet", "userAddress", "threadId", "mode", "haiId"}
    item = doc["paths"]["/api/memory/items/{memoryId}"]
    assert set(item) == {"get", "patch", "delete"}
    for method, op in item.items():
        query = {p["name"] for p in op["parameters"] if p["in"] == "query"}
        assert scope_fields <= query, (method, query)
    body = _resolve(doc, item["patch"]["requestBody"]["content"]["application/json"]["schema"])
    assert scope_fields <= set(body["properties"])


@pytest.mark.parametrize("page, rendered", [("/docs", "opblock"), ("/redoc", "api-content")])
def test_docs_render_offline_from_packaged_assets(base_url: str, page: str, rendered: str) -> None:
    """Headless Chromium with every host but the server unresolvable (the network off) renders the
    operations; the page names no asset outside the server."""
    html = httpx.get(f"{base_url}{page}").text
    assert re.findall(r'(?:src|href)="(https?://[^"]+)"', html) == []
    assert "/docs-assets/" in html
    assert httpx.get(f"{base_url}/docs-assets/swagger-ui-bundle.js").status_code == 200
    run = subprocess.run([_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                          "--virtual-time-budget=10000", "--dump-dom", f"{base_url}{page}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert rendered in run.stdout and "Remember a fact" in run.stdout, run.stdout[-2000:]
