"""``python -m media_usage_worker`` runs the ``media-usage`` command."""

from media_usage_worker.cli import main

main(prog_name="media-usage")
