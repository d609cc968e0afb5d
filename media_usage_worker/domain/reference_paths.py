"""Declared reference paths and media URLs (docs/operations.md, "Extraction rules").

A site declares where its own blocks and JSON fields keep media, one path per rule::

    body[_type=marketing.gallery].items[].imageUrl
    settings.favicon.mediaId

A path starts with a field slug; then ``.key`` steps into an object, ``[]`` into every item of
a list and ``[key=value]`` into the items of a list whose ``key`` equals ``value`` (Portable
Text's ``_type``, say). What a path reaches is read like an image field's value: a media id, an
object with an ``id`` (and ``provider``, ``mimeType``), or the URL of a media file.

Pure: parsing refuses a malformed path with one message; walking never raises on odd data.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from media_usage_worker.domain.content_model import FIELD_SLUG_PATTERN
from media_usage_worker.domain.errors import InvalidRule
from media_usage_worker.domain.validation import storable

MAX_PATH_CHARS = 300
MAX_STEPS = 16
# Paths one collection may declare. Each is walked for every entry of the collection, so the
# cost per entry grows with their number; a site needs a handful per block type.
MAX_PATHS_PER_COLLECTION = 128
MAX_PREFIX_CHARS = 500
# emdash serves every media file here (relative to the site), whatever the storage.
EMDASH_MEDIA_FILE_PATH = "/_emdash/api/media/file/"

_KEY = r"[A-Za-z_][A-Za-z0-9_\-]{0,63}"
_VALUE = r"[A-Za-z0-9_.:\-]{1,100}"
_STEP = re.compile(rf"\.(?P<key>{_KEY})|\[\]|\[(?P<match_key>{_KEY})=(?P<match_value>{_VALUE})\]")
_HEAD = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Step:
    """``key`` alone: into an object; neither: every list item; both ``match_*``: some items."""

    key: str | None = None
    match_key: str | None = None
    match_value: str | None = None


@dataclass(frozen=True)
class ReferencePath:
    text: str
    field_slug: str
    steps: tuple[Step, ...]

    def walk(self, value: object) -> Iterator[tuple[str, object]]:
        """Each value the path reaches in the field's ``value``, with its concrete path
        (``body[3].items[0].imageUrl``)."""
        yield from _walk(value, self.steps, self.field_slug)


def parse_reference_path(text: object) -> ReferencePath:
    """The parsed path; ``InvalidRule`` naming what is wrong when it is malformed."""
    if not isinstance(text, str) or not text or len(text) > MAX_PATH_CHARS:
        raise InvalidRule(f"A reference path is a string of 1 to {MAX_PATH_CHARS} characters.")
    head = _HEAD.match(text)
    if head is None or not FIELD_SLUG_PATTERN.fullmatch(head.group()):
        raise InvalidRule(
            f"Reference path {text!r} must start with a field slug (^[a-z][a-z0-9_]{{0,62}}$)."
        )
    steps = []
    position = head.end()
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            raise InvalidRule(
                f"Reference path {text!r}: cannot read {text[position:][:20]!r} at character "
                f"{position + 1}; steps are .key, [] and [key=value]."
            )
        steps.append(Step(match["key"], match["match_key"], match["match_value"]))
        position = match.end()
    if len(steps) > MAX_STEPS:
        raise InvalidRule(f"Reference path {text!r} has more than {MAX_STEPS} steps.")
    return ReferencePath(text, head.group(), tuple(steps))


def _walk(value: object, steps: tuple[Step, ...], path: str) -> Iterator[tuple[str, object]]:
    if not steps:
        yield path, value
        return
    step, rest = steps[0], steps[1:]
    if step.key is not None:
        if isinstance(value, Mapping) and step.key in value:
            yield from _walk(value[step.key], rest, f"{path}.{step.key}")
        return
    if not isinstance(value, list):
        return
    for index, item in enumerate(value):
        if step.match_key is None or (
            isinstance(item, Mapping) and item.get(step.match_key) == step.match_value
        ):
            yield from _walk(item, rest, f"{path}[{index}]")


def validate_media_url_prefix(prefix: object) -> str:
    """A media URL prefix: an absolute http(s) URL or a path, ending with ``/``."""
    if (
        not isinstance(prefix, str)
        or not 1 < len(prefix) <= MAX_PREFIX_CHARS
        or not storable(prefix)
        or prefix != prefix.strip()
        or not prefix.endswith("/")
        or not re.match(r"(?:https?://[^/\s]+)?/\S*\Z", prefix)
    ):
        raise InvalidRule(
            "A media URL prefix is an http(s) URL or a path starting with '/', ending with '/', "
            f"with no spaces, at most {MAX_PREFIX_CHARS} characters "
            "(https://cdn.example.com/media/ or /uploads/)."
        )
    return prefix


def media_file_key(value: str, prefixes: tuple[str, ...]) -> str | None:
    """The storage key a media file URL names, or ``None`` when ``value`` is not one.

    ``prefixes`` are the site's media URL prefixes; emdash's own file path always counts.
    The query and fragment are dropped and the key is URL-decoded.
    """
    text = value.strip()
    for prefix in (*prefixes, EMDASH_MEDIA_FILE_PATH):
        if text.startswith(prefix):
            key = unquote(re.split(r"[?#]", text[len(prefix) :], maxsplit=1)[0])
            return key if key and storable(key) else None
    return None


# What ends a media file URL written inside text: white space, quotes, brackets and angle
# brackets (HTML attributes, Markdown links, prose), and the query or fragment.
_URL_END = r"[^\s\"'`<>()\[\]{}?#\\]"
# Punctuation a sentence puts after a URL: tried both with and without it.
_TRAILING = ".,;:!"


@functools.lru_cache(maxsize=64)
def _embedded_pattern(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    every = sorted({*prefixes, EMDASH_MEDIA_FILE_PATH}, key=len, reverse=True)
    heads = "|".join(re.escape(prefix) for prefix in every if prefix)
    return re.compile(rf"(?:{heads})({_URL_END}+)")


def embedded_media_keys(text: str, prefixes: tuple[str, ...]) -> list[str]:
    """Every storage key a media file URL inside ``text`` may name (HTML attributes, Markdown
    links, link annotations, prose), each in the forms it may take (as written, URL-decoded,
    HTML-unescaped, without a sentence's trailing punctuation): a caller keeps the forms that
    name a media item. Cheap when no prefix occurs in the text."""
    if EMDASH_MEDIA_FILE_PATH not in text and not any(p and p in text for p in prefixes):
        return []
    keys: dict[str, None] = {}
    for match in _embedded_pattern(prefixes).finditer(text):
        written = match.group(1)
        for form in (written, unquote(written), html.unescape(written)):
            for key in (form, form.rstrip(_TRAILING)):
                if key and storable(key):
                    keys.setdefault(key)
    return list(keys)
