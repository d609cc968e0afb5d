"""What every command shares: exit codes, errors, the database option, tables."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from media_usage_worker.domain.errors import InvalidArgument, MediaUsageError
from media_usage_worker.domain.policy import DEFAULT_DATABASE_URL as DEFAULT_DATABASE_URL

F = TypeVar("F", bound=Callable[..., Any])


class Outcome(click.ClickException):
    """A result that is not success: exit code 1, one line on stderr."""

    exit_code = 1


class BadInput(click.ClickException):
    """An argument the project's validation refused: exit code 2 (usage), one line on stderr
    that says what is allowed (click's own parse errors add the usage text)."""

    exit_code = 2


def handle_errors(command: F) -> F:
    """Turn the project's exceptions into click's exit codes and one-line messages."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InvalidArgument as exc:
            raise BadInput(str(exc)) from None
        except MediaUsageError as exc:
            raise Outcome(str(exc)) from None
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise Outcome(f"database error: {detail}") from None

    return wrapper  # type: ignore[return-value]


def database_url_option(command: F) -> F:
    return click.option(
        "--database-url",
        envvar="MEDIA_USAGE_DATABASE_URL",
        default=DEFAULT_DATABASE_URL,
        show_default=True,
        help="SQLAlchemy URL (env MEDIA_USAGE_DATABASE_URL).",
    )(command)


@contextmanager
def open_engine(
    database_url: str, *, create: bool = False, migrated: bool = True
) -> Iterator[sa.Engine]:
    """The engine for one command, disposed however the command ends.

    Only ``create`` (``db upgrade``) may bring a SQLite file into being: any other command on a
    path with no file says so instead of leaving an empty database behind. With ``migrated``
    a database without this code's schema is refused with the command that fixes it, before
    any statement could fail on a missing table.
    """
    from media_usage_worker.pipeline.database import (
        create_engine,
        open_migrated,
        parse_database_url,
        refuse_missing_sqlite_file,
    )

    if migrated:
        engine = open_migrated(database_url)
    else:
        url = (
            parse_database_url(database_url) if create else refuse_missing_sqlite_file(database_url)
        )
        engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def table(headers: list[str], rows: list[list[Any]]) -> None:
    """An aligned plain-text table."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip())


def checked_id(value: object, option: str) -> str:
    """``value`` as an id an option may name, else one usage error saying what is allowed."""
    from media_usage_worker.domain import validation

    return validation.identifier(
        value,
        f"{option} must be a non-empty id of at most {validation.MAX_IDENTIFIER_LENGTH} "
        "characters, without NUL.",
    )


class OneLineFormatter(logging.Formatter):
    """A log record as one line: what went wrong and, for an exception, its type and text,
    never a traceback. An operator reading a command's output wants the cause, once per entry
    (a repair of a thousand broken entries prints a thousand lines, not fifty thousand)."""

    def format(self, record: logging.LogRecord) -> str:
        message = " ".join(record.getMessage().split())
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message += f" ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        return f"{record.levelname.lower()}: {message}"


def log_in_one_line() -> None:
    """Route this project's log records to stderr, one line each (once per process)."""
    package = logging.getLogger("media_usage_worker")
    if any(isinstance(h.formatter, OneLineFormatter) for h in package.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter())
    package.addHandler(handler)
    package.setLevel(logging.WARNING)
    package.propagate = False


def reconcile_soon() -> None:
    """Ask the workers to start reconciling now (``tasks.dispatch.reconcile_soon``): Celery is
    imported only by the commands that change what must be reconciled."""
    from media_usage_worker.tasks.dispatch import reconcile_soon as send

    send()
