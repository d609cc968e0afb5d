"""``media-usage``: the operator command line.

Exit codes: 0 success; 1 an outcome that is not success (refused, not found, conflict, database
unreachable or unmigrated); 2 bad usage. Errors are one line on stderr, never a traceback.
One module per group of commands: ``database``, ``content`` (collections), ``rules``, ``work``,
``sources``, ``reports``, ``cleanup``, ``serve``, ``demo``; ``common`` holds what they share.
"""

from __future__ import annotations

import click

from media_usage_worker.cli import (
    cleanup,
    content,
    database,
    demo,
    reports,
    rules,
    serve,
    sources,
    work,
)


@click.group()
@click.version_option(package_name="media-usage-worker", prog_name="media-usage")
def main() -> None:
    """Operate the media usage index and its durable work queue."""


for command in (
    database.db,
    database.activate_command,
    database.deactivate_command,
    content.collections,
    rules.rules,
    sources.sources,
    work.work,
    work.repair_command,
    reports.status_command,
    reports.usage_command,
    cleanup.unused_command,
    cleanup.retire_command,
    cleanup.restore_command,
    cleanup.purge_command,
    cleanup.dangling_command,
    cleanup.audit_command,
    demo.demo_command,
    serve.serve_command,
):
    main.add_command(command)
