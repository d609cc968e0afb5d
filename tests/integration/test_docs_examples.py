"""Every JSON example in docs/cli.md and docs/api.md has the keys the real command or request
answers with, nested objects and list items included, so the docs cannot drift from the code.

An example is found by its opening text; a new one without a way to produce it here fails the
test. In an example, ``{…}``, ``[...]`` and a last item ``...`` leave values out, and a key
``"…"`` says "and the rest as above": only the keys shown are checked there. Objects keyed by
data (ids, slugs, states) are listed per example and not compared key by key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from tests.doc_examples import differences, examples
from tests.http_server import Api, serving
from tests.support import active_collection, drain, insert_work, mark_coverage_complete


@pytest.fixture
def site(db: sa.Engine, migrated_url: str, tmp_path: Path) -> Iterator[tuple[str, Api]]:
    """posts: e1 uses m1 (in the library), e2 failed for good; coverage complete."""
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO media (id, filename, mime_type, storage_key) "
                    "VALUES ('m1', 'a.png', 'image/png', 'a.png')")
        )  # fmt: skip
        conn.execute(sa.text("INSERT INTO ec_posts (id, slug, hero) VALUES ('e1', 'e1', 'm1')"))
        conn.execute(sa.text("INSERT INTO ec_posts (id, slug) VALUES ('e2', 'e2')"))
        conn.execute(sa.text("INSERT INTO ec_posts (id, slug) VALUES ('old', 'old')"))
    drain(db)
    mark_coverage_complete(db)
    insert_work(db, posts, "e2", state="failed", attempt_count=5,
                last_error_code="MEDIA_USAGE_PROCESSING_FAILED")  # fmt: skip
    with serving(migrated_url, tmp_path) as api:
        yield migrated_url, api


def cli(url: str, *args: str) -> Any:
    done = CliRunner().invoke(main, [*args, "--database-url", url])
    return json.loads(done.stdout)  # progress lines go to stderr


Producer = Callable[[str, Api], Any]
# By the example's opening text: how to get the real answer, and its objects keyed by data.
CLI_EXAMPLES: dict[str, tuple[Producer, frozenset[str]]] = {
    '{"collections": [{"id"': (lambda u, a: cli(u, "collections", "list", "--json"), frozenset()),
    '{"collection": "posts", "items"': (
        lambda u, a: cli(u, "work", "list", "--collection", "posts", "--json"),
        frozenset(),
    ),
    '{"outcome": "pending"': (
        lambda u, a: cli(
            u, "work", "retry", "--collection", "posts", "--content-id", "e2", "--json"
        ),
        frozenset(),
    ),
    '{"capture": "active"': (
        lambda u, a: cli(u, "status", "--json"),
        frozenset({"$.collections[].work"}),
    ),
    '{"media_id": "m1"': (lambda u, a: cli(u, "usage", "m1", "--json"), frozenset()),
    '{"collection": "posts", "status": "complete", "indexed"': (
        lambda u, a: cli(u, "repair", "--collection", "posts", "--json"),
        frozenset(),
    ),
}
API_EXAMPLES: dict[str, tuple[Producer, frozenset[str]]] = {
    '{"error": {"code"': (lambda u, a: a.get("/v1/media/m1/usage?limit=abc").json, frozenset()),
    '{"ready": true': (lambda u, a: a.get("/readyz", token=None).json, frozenset()),
    '{"media_id": "01JH7Q0M2R"': (lambda u, a: a.get("/v1/media/m1/usage").json, frozenset()),
    '{"coverage": {"status"': (
        lambda u, a: a.get("/v1/usage?ids=m1,m2").json,
        frozenset({"$.counts"}),
    ),
    '{"collection": "posts", "status": "stale"': (
        lambda u, a: a.post("/v1/collections/posts/repair").json,
        frozenset(),
    ),
    '{"collection": "old_news"': (
        lambda u, a: a.request("DELETE", "/v1/collections/posts?force=true").json,
        frozenset(),
    ),
}


def _opening(example: Any) -> str:
    return json.dumps(example, ensure_ascii=False)


def _producer(
    known: dict[str, tuple[Producer, frozenset[str]]], example: Any
) -> tuple[Producer, frozenset[str]] | None:
    text = _opening(example)
    for opening, produced in known.items():
        if text.startswith(opening):
            return produced
    return None


@pytest.mark.parametrize(
    ("doc", "known"), [("cli.md", CLI_EXAMPLES), ("api.md", API_EXAMPLES)], ids=["cli", "api"]
)
def test_every_json_example_has_the_keys_of_the_real_answer(site, doc, known) -> None:
    url, api = site
    checked = 0
    # The examples in the order of the doc; a deleting one (the collection's) comes last.
    found = sorted(examples(doc), key=lambda e: "old_news" in _opening(e[1]))
    for line, example in found:
        if _opening(example).startswith('{"entries_written"'):
            continue  # the demo's: tests/acceptance/test_demo.py runs it and checks its keys
        produced = _producer(known, example)
        assert produced is not None, f"docs/{doc}:{line}: no way to check this example here"
        make, maps = produced
        problems = differences(example, make(url, api), maps)
        assert not problems, f"docs/{doc}:{line}: " + "; ".join(problems)
        checked += 1
    assert checked == len(known)
