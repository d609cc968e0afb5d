"""``media-usage db`` and ``collections`` through click's runner and as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.repository.migration.migrate import current_revision, head_revision


def test_db_upgrade_uses_the_environment_url(database_url: str) -> None:
    result = CliRunner().invoke(
        main, ["db", "upgrade"], env={"MEDIA_USAGE_DATABASE_URL": database_url}
    )
    assert result.exit_code == 0, result.output
    assert head_revision() in result.output
    assert current_revision(database_url) == head_revision()


def test_db_upgrade_as_a_subprocess_is_idempotent(database_url: str) -> None:
    command = [sys.executable, "-m", "media_usage_worker", "db", "upgrade"]
    for _ in range(2):
        done = subprocess.run(
            [*command, "--database-url", database_url], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
    assert current_revision(database_url) == head_revision()


def test_bad_url_is_usage_error_with_one_line() -> None:
    result = CliRunner().invoke(main, ["db", "upgrade", "--database-url", "mysql://u@h/db"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "Unsupported database URL scheme 'mysql'" in result.output


def test_collections_create_and_list(migrated_url: str) -> None:
    runner = CliRunner()
    fields_json = json.dumps(
        [
            {
                "slug": "gallery",
                "type": "repeater",
                "validation": {"subFields": [{"slug": "image", "type": "image"}]},
            }
        ]
    )
    created = runner.invoke(
        main,
        [
            "collections",
            "create",
            "posts",
            "--field",
            "hero:image",
            "--field",
            "body:portableText:required",
            "--fields-json",
            fields_json,
            "--database-url",
            migrated_url,
        ],
    )
    assert created.exit_code == 0, created.output
    listed = runner.invoke(main, ["collections", "list", "--json", "--database-url", migrated_url])
    assert listed.exit_code == 0
    (collection,) = json.loads(listed.output)["collections"]
    assert collection["slug"] == "posts"
    assert collection["fields"] == [
        {"slug": "hero", "type": "image"},
        {"slug": "body", "type": "portableText"},
        {"slug": "gallery", "type": "repeater"},
    ]
    again = runner.invoke(main, ["collections", "create", "posts", "--database-url", migrated_url])
    assert again.exit_code == 1 and "already exists" in again.output


def test_collections_create_rejects_bad_input_before_touching_the_database(
    migrated_url: str,
) -> None:
    runner = CliRunner()
    for args in (
        ["Posts"],
        ["posts", "--field", "hero"],
        ["posts", "--field", "id:string"],
        ["posts", "--fields-json", "{"],
        ["posts", "--field", "x:hologram"],
    ):
        result = runner.invoke(
            main, ["collections", "create", *args, "--database-url", migrated_url]
        )
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    engine = sa.create_engine(migrated_url.replace("postgresql://", "postgresql+psycopg://"))
    assert not sa.inspect(engine).has_table("ec_posts")
    engine.dispose()


def test_activate_command(migrated_url: str) -> None:
    runner = CliRunner()
    runner.invoke(main, ["collections", "create", "posts", "--database-url", migrated_url])
    for _ in range(2):
        result = runner.invoke(main, ["activate", "--database-url", migrated_url])
        assert result.exit_code == 0, result.output
        assert "capture active on 1 collection(s): posts" in result.output
    engine = sa.create_engine(migrated_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        state = conn.execute(sa.text("SELECT state FROM _emdash_media_usage_activation")).scalar()
    engine.dispose()
    assert state == "active"


def test_db_downgrade_refused_then_allowed(migrated_url: str) -> None:
    runner = CliRunner()
    runner.invoke(main, ["collections", "create", "posts", "--database-url", migrated_url])
    refused = runner.invoke(main, ["db", "downgrade", "--database-url", migrated_url])
    assert refused.exit_code == 1 and "Downgrade refused: 1 collection(s)" in refused.output
    assert current_revision(migrated_url) == head_revision()
    partial = runner.invoke(
        main,
        [
            "db",
            "downgrade",
            "--revision",
            "0001_core_content_registry",
            "--database-url",
            migrated_url,
        ],
    )
    assert partial.exit_code == 0, partial.output
    assert current_revision(migrated_url) == "0001_core_content_registry"
    assert runner.invoke(main, ["db", "upgrade", "--database-url", migrated_url]).exit_code == 0


def test_activation_refuses_a_host_registered_unsafe_slug_with_one_line(migrated_url: str) -> None:
    engine = sa.create_engine(migrated_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:  # what a host may write into the registry itself
        conn.execute(
            sa.text(
                "INSERT INTO _emdash_collections (id, slug, label) "
                "VALUES ('X1', 'Bad-Slug; DROP TABLE revisions', 'Bad')"
            )
        )
    engine.dispose()
    result = CliRunner().invoke(main, ["activate", "--database-url", migrated_url])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert "Collection slug 'Bad-Slug; DROP TABLE revisions' (id 'X1') is not one" in result.output


def test_a_label_that_is_not_storable_text_is_a_usage_error(migrated_url: str) -> None:
    for label in ("\udcff", "a\x00b"):
        result = CliRunner().invoke(
            main,
            ["collections", "create", "pages", "--label", label, "--database-url", migrated_url],
        )
        assert result.exit_code == 2, result.output
        assert "Collection label must be" in result.output
