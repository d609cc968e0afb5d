"""The console's posted forms (``application/x-www-form-urlencoded``), read within a size limit,
and the one place a redirect target from a form or a link is checked."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from fastapi import Request

from media_usage_worker.domain.errors import InvalidArgument

# A retirement posts up to a page of ids with the shown ones: well under this.
MAX_FORM_BYTES = 64 * 1024
MAX_VALUES = 500


@dataclass(frozen=True)
class Form:
    fields: dict[str, list[str]]

    def one(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else None

    def many(self, name: str) -> list[str]:
        return list(self.fields.get(name, []))


async def read_form(request: Request) -> Form:
    """The request's form; ``InvalidArgument`` for another content type, a body over the limit
    or text that is not UTF-8."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise InvalidArgument("The console posts forms (application/x-www-form-urlencoded).")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidArgument(f"A form is at most {MAX_FORM_BYTES} bytes.")
    try:
        fields = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
            max_num_fields=MAX_VALUES,
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgument("The form is not UTF-8 text of at most 500 fields.") from None
    return Form(fields)


def safe_next(target: str) -> str:
    """``target`` when it is a path of the console, else the overview: a sign-in link can never
    send the browser elsewhere."""
    if (
        target.startswith("/console")
        and not target.startswith("//")
        and "\\" not in target
        and all(c.isprintable() and not c.isspace() for c in target)
        and len(target) <= 2000
    ):
        return target
    return "/console/"
