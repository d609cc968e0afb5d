"""media-usage-worker: the operator CLI and the embedded demo."""
