"""A scope's capture from start to end: activation and deactivation, the capture triggers, and
the phases of a collection's deletion."""
