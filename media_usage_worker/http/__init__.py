"""The HTTP API (``media-usage serve``, docs/api.md): the read API and the operator's work
queue over JSON, health and readiness probes, and Prometheus metrics read from the database.

``settings`` reads its environment, ``errors`` gives every refusal one JSON shape, ``security``
checks the bearer token, ``metrics`` builds the scrape, ``app`` holds the routes.
"""
