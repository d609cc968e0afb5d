"""Everything that speaks SQL: engines, schema, migrations, repositories and triggers.

This package never imports Celery.
"""
