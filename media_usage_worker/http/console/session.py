"""The console's sign-in: a session cookie and the CSRF token of each form, both signed.

Signing in with the operator token sets a cookie ``<expires>.<nonce>.<signature>``: HttpOnly,
SameSite=Strict, ``Secure`` behind HTTPS. The key is derived from the operator token (or is
``MEDIA_USAGE_CONSOLE_KEY``), so every server process of one deployment accepts the same
cookie and a new token signs everyone out. A form's CSRF token is the session's nonce signed
for forms: it is valid for that session only, and a page that did not come from this server
cannot know it. Expiry is the server's own clock: a session is not a lease.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

COOKIE = "media_usage_console"
# A session lasts a working day; signing in again is one field.
SESSION_SECONDS = 12 * 3600
_CONTEXT = b"media-usage console session v1"


def session_key(token: str, configured: str | None = None) -> bytes:
    """The key sessions are signed with: ``configured`` when set, else one derived from the
    operator token (never the token itself)."""
    secret = (configured or token).encode("utf-8", "surrogateescape")
    return hmac.new(secret, _CONTEXT, hashlib.sha256).digest()


def _sign(key: bytes, purpose: str, message: str) -> str:
    return hmac.new(key, f"{purpose}:{message}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Session:
    nonce: str
    expires: int

    def csrf_token(self, key: bytes) -> str:
        return _sign(key, "csrf", self.nonce)


def new_cookie(key: bytes, now: float | None = None) -> tuple[str, Session]:
    """A fresh session and its cookie value."""
    expires = int((time.time() if now is None else now) + SESSION_SECONDS)
    session = Session(secrets.token_hex(16), expires)
    body = f"{session.expires}.{session.nonce}"
    return f"{body}.{_sign(key, 'session', body)}", session


def read_cookie(key: bytes, value: str | None, now: float | None = None) -> Session | None:
    """The session a cookie holds, or None when it is absent, malformed, forged or expired."""
    if not value or len(value) > 200:
        return None
    expires, _, rest = value.partition(".")
    nonce, _, signature = rest.partition(".")
    if not (expires.isdigit() and len(nonce) == 32 and len(signature) == 64):
        return None
    expected = _sign(key, "session", f"{expires}.{nonce}")
    if not hmac.compare_digest(expected, signature):
        return None
    if int(expires) <= (time.time() if now is None else now):
        return None
    return Session(nonce, int(expires))


def csrf_holds(key: bytes, session: Session | None, sent: str | None) -> bool:
    """Whether a form's CSRF token is this session's."""
    if session is None or not sent:
        return False
    return hmac.compare_digest(session.csrf_token(key), sent)
