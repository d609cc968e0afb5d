"""The API's settings, from the environment, checked once when the server starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from media_usage_worker.domain.errors import InvalidArgument, InvalidSetting
from media_usage_worker.domain.policy import positive_setting
from media_usage_worker.pipeline.cleanup import PurgeTarget, checked_purge_target

# A token shorter than this is refused: it would be guessable by anyone who can reach the port.
MIN_TOKEN_LENGTH = 16
# Request bodies (the operator's POSTs) are a few ids; anything larger is refused unread.
MAX_BODY_BYTES = 8192
_TRUE, _FALSE = {"1", "true", "yes"}, {"", "0", "false", "no"}
# Requests one server process runs at once, by default and at most.
DEFAULT_THREADS = 4
MAX_THREADS = 256


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
    # Requests one server process runs at once (its threads; the rest wait their turn). Few
    # threads contend less for the interpreter when the database is near and the process is
    # busy (docs/benchmarks.md §6); more keep it serving while requests wait on a distant one.
    threads: int = DEFAULT_THREADS
    # Where ``POST /v1/media/purge`` hands purged files (docs/operations.md).
    purge: PurgeTarget = field(default_factory=PurgeTarget)
    purge_queue: str = "celery"
    # The console (docs/console.md): a link into the host's admin per use (``{collection}``
    # and ``{id}`` filled in), where thumbnails load from, and the key sessions are signed with
    # (derived from the token when unset).
    admin_url: str | None = None
    media_base_url: str | None = None
    console_key: str | None = None

    @property
    def storage_dir(self) -> Path | None:
        """Where the media files are (``MEDIA_USAGE_STORAGE_DIR``): the console's thumbnails."""
        return self.purge.directory

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
            admin_url=_checked_url(env, "MEDIA_USAGE_ADMIN_URL", template=True),
            media_base_url=_checked_url(env, "MEDIA_USAGE_MEDIA_BASE_URL", template=False),
            console_key=_checked_console_key(env),
            purge=purge,
            purge_queue=env.get("MEDIA_USAGE_PURGE_QUEUE") or "celery",
            token=token,
            public_reads=reads in _TRUE,
            metrics_cache_seconds=positive_setting(env, "MEDIA_USAGE_METRICS_CACHE_SECONDS", 5),
            header_timeout_seconds=positive_setting(
                env, "MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS", 10
            ),
            threads=_checked_threads(env),
        )


def _checked_threads(env: Mapping[str, str]) -> int:
    threads = positive_setting(env, "MEDIA_USAGE_API_THREADS", DEFAULT_THREADS)
    if threads > MAX_THREADS:
        raise InvalidSetting(f"MEDIA_USAGE_API_THREADS is at most {MAX_THREADS}, not {threads}.")
    return threads


def _checked_url(env: Mapping[str, str], name: str, *, template: bool) -> str | None:
    """An http(s) URL (or a path on this site) a page links to; a template must hold
    ``{id}`` and may hold ``{collection}``, and nothing else in braces."""
    value = env.get(name) or None
    if value is None:
        return None
    fits = value.startswith(("https://", "http://", "/")) and not value.startswith("//")
    printable = value.isascii() and value.isprintable() and " " not in value and len(value) <= 2000
    if template:
        rest = value.replace("{collection}", "").replace("{id}", "")
        fits = fits and "{id}" in value and "{" not in rest and "}" not in rest
    if not (fits and printable):
        what = "with {id} (and optionally {collection}) in it" if template else ""
        raise InvalidSetting(
            f"{name} must be an http(s) URL or a path starting with /{' ' + what if what else ''}, "
            f"not {value[:60]!r}."
        )
    return value


def _checked_console_key(env: Mapping[str, str]) -> str | None:
    key = env.get("MEDIA_USAGE_CONSOLE_KEY") or None
    if key is not None and (len(key) < MIN_TOKEN_LENGTH or not key.isprintable()):
        raise InvalidSetting(
            f"MEDIA_USAGE_CONSOLE_KEY must be at least {MIN_TOKEN_LENGTH} printable characters."
        )
    return key
