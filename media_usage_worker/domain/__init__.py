"""Pure domain logic of media-usage-worker: no Celery, no SQLAlchemy, no I/O."""
