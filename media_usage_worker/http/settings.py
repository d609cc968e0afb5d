"""The API's settings, from the environment, checked once when the server starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from media_usage_worker.domain.errors import InvalidArgument, InvalidSetting
from media_usage_worker.domain.policy import positive_setting
from media_usage_worker.pipeline.cleanup import PurgeTarget, checked_purge_target

# A token shorter than this is refused: it would be guessable by anyone who can reach the port.
MIN_TOKEN_LENGTH = 16
# Request bodies (the operator's POSTs) are a few ids; anything larger is refused unread.
MAX_BODY_BYTES = 8192
_TRUE, _FALSE = {"1", "true", "yes"}, {"", "0", "false", "no"}


# A token must have at least this many different characters: "aaaaaaaaaaaaaaaa" is 16
# characters and guessable at the first try.
MIN_DISTINCT_CHARACTERS = 8


def check_token(token: str) -> None:
    """``InvalidSetting`` for a token that cannot work or is trivially weak. HTTP headers carry
    ASCII (a non-ASCII token could never match what a client sends), and whitespace is cut
    from what a client sends."""
    rule = (
        f"MEDIA_USAGE_API_TOKEN must be at least {MIN_TOKEN_LENGTH} printable ASCII characters "
        f"without spaces, at least {MIN_DISTINCT_CHARACTERS} of them different (for example "
        "the output of `openssl rand -hex 32`); unset, operator endpoints are disabled"
    )
    if len(token) < MIN_TOKEN_LENGTH or not token.isascii() or not token.isprintable():
        raise InvalidSetting(f"{rule}.")
    if any(c.isspace() for c in token):
        raise InvalidSetting(f"{rule}: this one has spaces.")
    if len(set(token)) < MIN_DISTINCT_CHARACTERS:
        raise InvalidSetting(f"{rule}: this one repeats a few characters.")


@dataclass(frozen=True)
class ApiSettings:
    token: str | None
    public_reads: bool
    metrics_cache_seconds: int
    # A client has this long to send a request's headers; then its connection is closed.
    header_timeout_seconds: int = 10
    # Where ``POST /v1/media/purge`` hands purged files (docs/operations.md).
    purge: PurgeTarget = field(default_factory=PurgeTarget)
    purge_queue: str = "celery"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        token = env.get("MEDIA_USAGE_API_TOKEN") or None
        if token is not None:
            check_token(token)
        reads = (env.get("MEDIA_USAGE_API_PUBLIC_READS") or "").strip().lower()
        if reads not in _TRUE | _FALSE:
            raise InvalidSetting(
                "MEDIA_USAGE_API_PUBLIC_READS must be one of "
                f"{', '.join(sorted(_TRUE | _FALSE - {''}))} (or unset), not {reads[:40]!r}."
            )
        try:
            purge = checked_purge_target(
                env.get("MEDIA_USAGE_PURGE_TASK") or None,
                env.get("MEDIA_USAGE_STORAGE_DIR") or None,
            )
        except InvalidArgument as exc:
            raise InvalidSetting(str(exc)) from None
        return cls(
            purge=purge,
            purge_queue=env.get("MEDIA_USAGE_PURGE_QUEUE") or "celery",
            token=token,
            public_reads=reads in _TRUE,
            metrics_cache_seconds=positive_setting(env, "MEDIA_USAGE_METRICS_CACHE_SECONDS", 5),
            header_timeout_seconds=positive_setting(
                env, "MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS", 10
            ),
        )
