"""Bearer-token checks: operator endpoints always need ``MEDIA_USAGE_API_TOKEN``; read
endpoints too unless ``MEDIA_USAGE_API_PUBLIC_READS=1``. With no token configured, whatever
needs one is refused with 403 and the reason (fail closed)."""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from media_usage_worker.http.errors import ApiError
from media_usage_worker.http.settings import ApiSettings

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="media-usage"'}


def token_matches(configured: str, offered: str) -> bool:
    """The operator token, whitespace around it cut; digests of both compared in constant time:
    neither the token nor its length leaks."""
    expected = hashlib.sha256(configured.encode()).digest()
    given = hashlib.sha256(offered.strip().encode("utf-8", "surrogateescape")).digest()
    return hmac.compare_digest(given, expected)


def check(request: Request, settings: ApiSettings, *, operator: bool) -> None:
    """Raise ``ApiError`` (401 or 403) unless the request may go on."""
    if not operator and settings.public_reads:
        return
    if settings.token is None:
        how = "" if operator else ", or MEDIA_USAGE_API_PUBLIC_READS=1 for read endpoints"
        raise ApiError(
            403, "forbidden", f"MEDIA_USAGE_API_TOKEN is not set: this endpoint is disabled{how}."
        )
    sent = request.headers.getlist("authorization")
    if len(sent) > 1:
        # Which one would count is a guess a proxy and this server may make differently.
        raise ApiError(400, "invalid_argument", "Send one Authorization header, not several.")
    scheme, _, given = (sent[0] if sent else "").partition(" ")
    if scheme.lower() != "bearer" or not token_matches(settings.token, given):
        raise ApiError(401, "unauthorized", "A valid bearer token is required.", _CHALLENGE)
