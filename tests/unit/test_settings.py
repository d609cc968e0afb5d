"""Every setting is checked when a worker or beat starts: a bad value is named, with
what is allowed, on one line; nothing falls back to a default in silence."""

from __future__ import annotations

import pytest

from media_usage_worker.domain.errors import InvalidSetting
from media_usage_worker.tasks import settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(settings.os.environ):
        if name.startswith("MEDIA_USAGE_"):
            monkeypatch.delenv(name)


def test_the_defaults_are_valid() -> None:
    settings.check_all()
    assert (settings.tick_seconds(), settings.batch_size(), settings.queue_name()) == (
        5, 300, "media_usage",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("MEDIA_USAGE_TICK_SECONDS", "abc", "MEDIA_USAGE_TICK_SECONDS must be a positive whole"),
        ("MEDIA_USAGE_RECONCILE_SECONDS", "0", "MEDIA_USAGE_RECONCILE_SECONDS must be a positive"),
        ("MEDIA_USAGE_LEASE_SECONDS", "-5", "MEDIA_USAGE_LEASE_SECONDS must be a positive"),
        (
            "MEDIA_USAGE_BATCH_SIZE",
            "5000",
            "MEDIA_USAGE_BATCH_SIZE must be from 1 to 1000, not 5000",
        ),
        ("MEDIA_USAGE_MAX_OCCURRENCES", "1e6", "MEDIA_USAGE_MAX_OCCURRENCES must be a positive"),
        ("MEDIA_USAGE_RECONCILE_DEFER_SECONDS", "x", "MEDIA_USAGE_RECONCILE_DEFER_SECONDS must"),
        ("MEDIA_USAGE_TASK_TIME_LIMIT", "9000", "MEDIA_USAGE_TASK_TIME_LIMIT must be at most"),
        ("MEDIA_USAGE_QUEUE", "media usage", "MEDIA_USAGE_QUEUE must be 1 to 200 letters"),
        ("MEDIA_USAGE_QUEUE", "q*", "MEDIA_USAGE_QUEUE must be"),
        ("MEDIA_USAGE_BROKER_URL", "localhost:6379", "MEDIA_USAGE_BROKER_URL must be a broker URL"),
        ("MEDIA_USAGE_BROKER_URL", "filesystem://", "needs MEDIA_USAGE_BROKER_FOLDER"),
        ("MEDIA_USAGE_DATABASE_URL", "mysql://x/y", "MEDIA_USAGE_DATABASE_URL: "),
    ],
)
def test_a_bad_value_is_named_with_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidSetting) as refused:
        settings.check_all()
    message = str(refused.value)
    assert says in message
    assert "\n" not in message


def test_every_bad_value_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIA_USAGE_TICK_SECONDS", "abc")
    monkeypatch.setenv("MEDIA_USAGE_LEASE_SECONDS", "0")  # also the dispatch TTL's default
    with pytest.raises(InvalidSetting) as refused:
        settings.check_all()
    message = str(refused.value)
    assert message.count("MEDIA_USAGE_TICK_SECONDS") == 1
    assert message.count("MEDIA_USAGE_LEASE_SECONDS") == 1


def test_import_time_reads_fall_back_only_for_the_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIA_USAGE_TICK_SECONDS", "abc")
    assert settings.or_default(settings.tick_seconds, 5) == 5
    with pytest.raises(InvalidSetting):
        settings.tick_seconds()


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (" " * 16, "without spaces"),
        ("a" * 40, "repeats a few characters"),
        ("abcdabcdabcdabcd", "repeats a few characters"),
        ("tökén-0123456789abcdef", "printable ASCII"),
        ("good token 0123456789", "spaces"),
        ("short", "at least 16"),
    ],
)
def test_a_token_that_cannot_work_or_is_trivially_weak_is_refused(token: str, says: str) -> None:
    from media_usage_worker.domain.errors import InvalidSetting
    from media_usage_worker.http.settings import ApiSettings

    with pytest.raises(InvalidSetting, match=says):
        ApiSettings.from_env({"MEDIA_USAGE_API_TOKEN": token})


def test_a_random_token_is_accepted() -> None:
    from media_usage_worker.http.settings import ApiSettings

    token = "3f9a1c0e5b7d2a8c4e6f1b3d5a7c9e0f"
    assert ApiSettings.from_env({"MEDIA_USAGE_API_TOKEN": token}).token == token


def test_the_servers_purge_target_is_checked_when_it_starts(tmp_path) -> None:
    from media_usage_worker.http.settings import ApiSettings

    base = {"MEDIA_USAGE_API_TOKEN": "0123456789abcdef0123"}
    settings = ApiSettings.from_env({**base, "MEDIA_USAGE_STORAGE_DIR": str(tmp_path)})
    assert settings.purge.directory == tmp_path.resolve()
    assert ApiSettings.from_env(base).purge.task is None
    for bad in (
        {"MEDIA_USAGE_STORAGE_DIR": "relative"},
        {"MEDIA_USAGE_STORAGE_DIR": str(tmp_path / "missing")},
        {"MEDIA_USAGE_PURGE_TASK": "not a task name"},
        {"MEDIA_USAGE_PURGE_TASK": "host.tasks.purge", "MEDIA_USAGE_STORAGE_DIR": str(tmp_path)},
    ):
        with pytest.raises(InvalidSetting):
            ApiSettings.from_env({**base, **bad})


def test_public_reads_names_every_value_it_takes() -> None:
    from media_usage_worker.http.settings import ApiSettings

    base = {"MEDIA_USAGE_API_TOKEN": "0123456789abcdef0123"}
    for taken in ("yes", "true", "1", "no", "0", "false"):
        ApiSettings.from_env({**base, "MEDIA_USAGE_API_PUBLIC_READS": taken})
    with pytest.raises(InvalidSetting) as refused:
        ApiSettings.from_env({**base, "MEDIA_USAGE_API_PUBLIC_READS": "off"})
    message = str(refused.value)
    assert all(word in message for word in ("yes", "no", "true", "false", "1", "0")), message
    assert "'off'" in message


def test_the_servers_threads_are_a_bounded_whole_number_and_size_its_pool() -> None:
    import anyio.to_thread
    import sqlalchemy as sa

    from media_usage_worker.http.app import create_app
    from media_usage_worker.http.settings import MAX_THREADS, ApiSettings

    assert ApiSettings.from_env({}).threads == 4
    assert ApiSettings.from_env({"MEDIA_USAGE_API_THREADS": "40"}).threads == 40
    for bad in ("0", "-1", "four", str(MAX_THREADS + 1)):
        with pytest.raises(InvalidSetting) as refused:
            ApiSettings.from_env({"MEDIA_USAGE_API_THREADS": bad})
        assert "MEDIA_USAGE_API_THREADS" in str(refused.value)
    app = create_app(
        sa.create_engine("sqlite://"), ApiSettings.from_env({"MEDIA_USAGE_API_THREADS": "3"})
    )

    async def started() -> int:
        async with app.router.lifespan_context(app):
            return anyio.to_thread.current_default_thread_limiter().total_tokens

    assert anyio.run(started) == 3
