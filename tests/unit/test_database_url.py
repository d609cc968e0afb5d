"""URL validation happens before any connection is attempted."""

import pytest

from media_usage_worker.domain.errors import InvalidDatabaseURL
from media_usage_worker.repository.base.db import create_engine, parse_database_url


@pytest.mark.parametrize(
    ("url", "drivername"),
    [
        ("sqlite:///media_usage.db", "sqlite"),
        ("sqlite+pysqlite:////tmp/x.db", "sqlite"),
        ("postgresql://u@localhost/db", "postgresql+psycopg"),
        ("postgres://u:p@localhost/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u:p@localhost:5433/db", "postgresql+psycopg"),
    ],
)
def test_supported_urls_get_the_project_driver(url: str, drivername: str) -> None:
    assert parse_database_url(url).drivername == drivername


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "mysql://u@localhost/db",
        "postgresql+psycopg2://u@localhost/db",
        "postgresql://u@localhost",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite+aiosqlite:///x.db",
        "notaurl://",
        "http://x",
        "postgres+asyncpg://u@localhost/db",
        "://nothing",
        "postgresql://u@localhost:99999/db",
        "postgresql://u@localhost:0/db",
    ],
)
def test_malformed_or_unsupported_urls_raise_value_error(url: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        create_engine(url)
    assert isinstance(excinfo.value, InvalidDatabaseURL)
    message = str(excinfo.value)
    assert message.endswith(".") and "\n" not in message
    assert "sqlite:///" in message  # names the forms that are accepted
