"""The API's settings, from the environment, checked once when the server starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from media_usage_worker.domain.errors import InvalidSetting
from media_usage_worker.domain.policy import positive_setting

# A token shorter than this is refused: it would be guessable by anyone who can reach the port.
MIN_TOKEN_LENGTH = 16
# Request bodies (the operator's POSTs) are a few ids; anything larger is refused unread.
MAX_BODY_BYTES = 8192
_TRUE, _FALSE = {"1", "true", "yes"}, {"", "0", "false", "no"}


@dataclass(frozen=True)
class ApiSettings:
    token: str | None
    public_reads: bool
    metrics_cache_seconds: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        token = env.get("MEDIA_USAGE_API_TOKEN") or None
        if token is not None and (len(token) < MIN_TOKEN_LENGTH or not token.isprintable()):
            raise InvalidSetting(
                f"MEDIA_USAGE_API_TOKEN must be at least {MIN_TOKEN_LENGTH} printable "
                "characters (unset, operator endpoints are disabled)."
            )
        reads = (env.get("MEDIA_USAGE_API_PUBLIC_READS") or "").strip().lower()
        if reads not in _TRUE | _FALSE:
            raise InvalidSetting(
                f"MEDIA_USAGE_API_PUBLIC_READS must be 1 or 0, not {reads[:40]!r}."
            )
        return cls(
            token=token,
            public_reads=reads in _TRUE,
            metrics_cache_seconds=positive_setting(env, "MEDIA_USAGE_METRICS_CACHE_SECONDS", 5),
        )
