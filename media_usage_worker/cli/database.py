"""``db upgrade`` / ``downgrade``, ``activate`` and ``deactivate``: the schema and capture."""

from __future__ import annotations

import click

from media_usage_worker.cli.common import (
    database_url_option,
    handle_errors,
    open_engine,
    reconcile_soon,
)


@click.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@database_url_option
@click.option("--check", is_flag=True, help="Print what would change; change nothing.")
@handle_errors
def db_upgrade(database_url: str, check: bool) -> None:
    """Apply every migration and adopt the media usage tables the database already has
    (idempotent): one line per table that gains columns or indexes."""
    from media_usage_worker.pipeline.database import (
        current_revision,
        upgrade,
        upgrade_plan,
    )

    with open_engine(database_url, create=not check, migrated=False) as engine:
        if check:
            pending, plan = upgrade_plan(engine)
            click.echo(f"migrations to apply: {', '.join(pending) or 'none'}")
            for change in plan:
                click.echo(change.shown())
            if not plan:
                click.echo("existing tables: nothing to add")
            return
        for change in upgrade(engine):
            click.echo(change.shown().replace(": adds ", ": added ", 1))
        click.echo(f"database at revision {current_revision(engine)}")


@db.command("downgrade")
@database_url_option
@click.option("--revision", default="base", show_default=True)
@handle_errors
def db_downgrade(database_url: str, revision: str) -> None:
    """Revert migrations; refused while media usage state exists."""
    from media_usage_worker.pipeline.database import (
        check_revision,
        current_revision,
        downgrade,
    )

    check_revision(revision)
    with open_engine(database_url, migrated=False) as engine:
        downgrade(engine, revision)
        click.echo(f"database at revision {current_revision(engine) or 'base'}")


@click.command("activate")
@database_url_option
@handle_errors
def activate_command(database_url: str) -> None:
    """Install capture triggers on every collection and turn incremental capture on.

    Content written before activation is picked up by reconciliation. Running it again
    re-verifies every collection's triggers and changes nothing else.
    """
    from media_usage_worker.pipeline.capture import activate

    with open_engine(database_url) as engine:
        slugs = activate(engine)
    reconcile_soon()  # content written before activation is indexed from now on
    click.echo(f"capture active on {len(slugs)} collection(s): {', '.join(slugs) or '-'}")


@click.command("deactivate")
@click.confirmation_option(
    prompt="Drop every capture trigger and delete all queued media usage work?",
    help="Do not ask for confirmation.",
)
@database_url_option
@handle_errors
def deactivate_command(database_url: str) -> None:
    """Turn capture off: drop every capture trigger and delete queued work and reconciliations.

    Host writes are then neither captured nor refused, and no coverage is trusted. The index
    stays; `activate` turns capture on again and reconciles everything. Needed before
    `db downgrade` (docs/operations.md, "Deactivating and uninstalling").
    """
    from media_usage_worker.pipeline.capture import deactivate

    with open_engine(database_url) as engine:
        slugs = deactivate(engine)
    click.echo(f"capture off on {len(slugs)} collection(s): {', '.join(slugs) or '-'}")
