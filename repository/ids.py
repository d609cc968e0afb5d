"""ULIDs, emdash's id format for every generated id (tokens, generations, registry rows)."""

from ulid import ULID


def new_ulid() -> str:
    return str(ULID())
