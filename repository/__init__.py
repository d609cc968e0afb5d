"""The fixed import names of the data layer (docs/api.md), kept for scripts and deployments.

The code lives in ``media_usage_worker.repository``; this package only re-exports the names
the design fixes. Nothing inside ``media_usage_worker`` imports it, so a host project with a
``repository.py`` of its own loses nothing when its module takes this name first.
"""
