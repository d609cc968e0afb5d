"""The console's pages (docs/console.md): server-rendered HTML over the same read API and
pipeline as the CLI and the JSON API; no SQL here.

Reading needs a signed-in session, unless ``MEDIA_USAGE_API_PUBLIC_READS`` is set; acting always
needs one, and every action is a POST carrying the session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote, urlencode

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from media_usage_worker.api import MediaUsage, UsageEntry
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument, MediaUsageError
from media_usage_worker.domain.vocabulary import RetryOutcome
from media_usage_worker.http.bodies import whole_days
from media_usage_worker.http.console import chart, session
from media_usage_worker.http.console.forms import Form, read_form, safe_next
from media_usage_worker.http.console.render import Renderer, shown_age, shown_bytes
from media_usage_worker.http.console.thumbnails import thumbnail_response
from media_usage_worker.http.security import token_matches
from media_usage_worker.http.settings import ApiSettings
from media_usage_worker.pipeline import cleanup, operator_retry
from media_usage_worker.pipeline.purge import purge

ACTOR = "console"
PAGE = 48
TYPES = [("", "Any type"), ("image/", "Images"), ("video/", "Video"), ("audio/", "Audio"),
         ("application/", "Documents")]  # fmt: skip
# What a redirect after an action says: fixed texts, so no link can make the page say anything.
DONE = {
    "retried": "The item is pending again; a worker picks it up at the next tick.",
    "not_retried": "Not retried: a worker holds the item now, or it changed meanwhile.",
    "restored": "Restored to the library.",
    "not_restored": "Not restored: it is no longer in the quarantine.",
    "retired": "Retired into the quarantine.",
    "none_retired": "Nothing was retired: every item was refused (see the preview's reasons).",
    "signed_out": "Signed out.",
}


class Console:
    """One server's console: its settings, its renderer and the read API on its engine."""

    def __init__(self, engine: sa.Engine, settings: ApiSettings) -> None:
        self.engine = engine
        self.index = MediaUsage(engine)
        self.settings = settings
        self.key = (
            session.session_key(settings.token, settings.console_key)
            if settings.token is not None
            else b""
        )
        self.render = Renderer(settings)
        images = "'self'"
        if settings.media_base_url is not None and "://" in settings.media_base_url:
            scheme, _, rest = settings.media_base_url.partition("://")
            images += f" {scheme}://{rest.split('/')[0]}"
        # Only this server's own style, script and forms; no framing; nothing cached.
        self.headers = {
            "Content-Security-Policy": (
                f"default-src 'self'; img-src {images}; style-src 'self'; script-src 'self'; "
                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
            ),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
            "Cache-Control": "no-store",
        }

    def session_of(self, request: Request) -> session.Session | None:
        if self.settings.token is None:
            return None
        return session.read_cookie(self.key, request.cookies.get(session.COOKIE))

    def page(self, request: Request, name: str, title: str, **values: Any) -> HTMLResponse:
        held = self.session_of(request)
        status = values.pop("status_code", 200)
        done = request.query_params.get("done")
        values.setdefault("notice", DONE.get(done or ""))
        html = self.render.page(
            name,
            title=title,
            current=request.url.path,
            signed_in=held is not None,
            can_act=held is not None,
            csrf=held.csrf_token(self.key) if held else "",
            **values,
        )
        return HTMLResponse(html, status_code=status, headers=self.headers)

    def refusal(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.page(
            request, "message.html", "Not allowed", message=message, status_code=status,
            next_href="/console/login", next_label="Sign in",
        )  # fmt: skip

    def reader(self, request: Request) -> Response | None:
        """None when the request may read; else the answer to send instead."""
        if self.session_of(request) is not None or self.settings.public_reads:
            return None
        if self.settings.token is None:
            return self.refusal(request, 403, "MEDIA_USAGE_API_TOKEN is not set on the server: "
                                "the console is disabled (or set MEDIA_USAGE_API_PUBLIC_READS=1 "
                                "to read without signing in).")  # fmt: skip
        target = "/console/login?" + urlencode({"next": request.url.path})
        return RedirectResponse(target, status_code=303)

    async def operator(self, request: Request) -> tuple[Form, Response | None]:
        """The posted form, and None when the request may act; else the answer to send."""
        form = await read_form(request)
        held = self.session_of(request)
        if held is None:
            return form, self.refusal(request, 403, "Sign in with the operator token to act.")
        if not session.csrf_holds(self.key, held, form.one("csrf")):
            return form, self.refusal(
                request, 403, "This form expired or did not come from this console: reload the "
                "page and try again.",
            )  # fmt: skip
        return form, None


def _route_class(console: Console) -> type[APIRoute]:
    """Routes whose refusals are pages: a bad input says what to fix, in HTML, not JSON."""

    class ConsoleRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            answer = super().get_route_handler()

            async def handler(request: Request) -> Response:
                try:
                    return await answer(request)
                except InvalidArgument as exc:
                    return console.page(request, "message.html", "Not understood",
                                        message=str(exc), status_code=400)  # fmt: skip
                except MediaUsageError as exc:
                    return console.page(request, "message.html", "Refused",
                                        message=str(exc), status_code=409)  # fmt: skip

            return handler

    return ConsoleRoute


def console_routes(engine: sa.Engine, settings: ApiSettings) -> APIRouter:
    console = Console(engine, settings)
    router = APIRouter(
        prefix="/console", include_in_schema=False, route_class=_route_class(console)
    )
    _sign_in_routes(router, console)
    _overview_routes(router, console)
    _unused_routes(router, console)
    _media_routes(router, console)
    _quarantine_routes(router, console)
    return router


def _sign_in_routes(router: APIRouter, console: Console) -> None:
    @router.get("/login")
    def login_form(request: Request, next: str = "/console/") -> Response:
        if console.settings.token is None:
            return console.refusal(request, 403, "MEDIA_USAGE_API_TOKEN is not set on the "
                                   "server: there is nothing to sign in with.")  # fmt: skip
        return console.page(request, "login.html", "Sign in", next=safe_next(next), on_login=True)

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await read_form(request)
        token = console.settings.token
        target = safe_next(form.one("next") or "/console/")
        if token is None or not token_matches(token, form.one("token") or ""):
            return console.page(
                request, "login.html", "Sign in", next=target, on_login=True,
                problem="That is not the operator token.", status_code=401,
            )  # fmt: skip
        value, _ = session.new_cookie(console.key)
        answer = RedirectResponse(target, status_code=303)
        answer.set_cookie(
            session.COOKIE, value, max_age=session.SESSION_SECONDS, path="/console",
            httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip
        return answer

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        _, refused = await console.operator(request)
        if refused is not None:
            return refused
        answer = RedirectResponse("/console/login?done=signed_out", status_code=303)
        answer.delete_cookie(session.COOKIE, path="/console")
        return answer


def _overview_routes(router: APIRouter, console: Console) -> None:
    @router.get("/")
    def overview(request: Request) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        status = console.index.status()
        scopes = status.collections + status.sources
        queued, rate = chart.series(console.index.pace_samples())
        due = [s.oldest_due_age_seconds for s in scopes if s.oldest_due_age_seconds is not None]
        failures = [(s, f) for s in scopes for f in s.failed]
        return console.page(
            request, "overview.html", "Overview", status=status, scopes=scopes,
            work_left=sum(n for s in scopes for state, n in s.work.items() if state != "failed"),
            oldest_due=max(due) if due else None, failures=failures[:20],
            queued=queued, rate=rate, chart=chart.svg(queued, rate), why=_why,
        )  # fmt: skip

    @router.post("/work/retry")
    async def retry(request: Request) -> Response:
        form, refused = await console.operator(request)
        if refused is not None:
            return refused
        collection_id = check.named_identifier("collection_id", form.one("collection_id"))
        content_id = check.named_identifier("content_id", form.one("content_id"))

        def run() -> bool:
            if (
                operator_retry.retry_refusal(
                    console.engine, collection_id=collection_id, content_id=content_id
                )
                is not None
            ):
                return False
            done = operator_retry.retry_operator_work(
                console.engine, collection_id=collection_id, content_id=content_id
            )
            return done.outcome == RetryOutcome.PENDING

        retried = await run_in_threadpool(run)
        return RedirectResponse(f"/console/?done={'retried' if retried else 'not_retried'}", 303)

    @router.get("/dangling")
    def dangling(request: Request) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        found, total = console.index.dangling(check.OPERATOR_MAX_LIMIT)
        return console.page(request, "dangling.html", "Dangling references",
                            references=[d.shown() for d in found], total=total)  # fmt: skip

    @router.get("/audit")
    def audit(request: Request) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        return console.page(request, "audit.html", "Audit", entries=console.index.audit(200))


def _why(scope: Any) -> str:
    if scope.coverage == "complete":
        return ""
    if scope.reason:
        why = str(scope.reason)
    elif run := scope.reconciliation:
        why = f"reconciliation {run.get('state')} ({run.get('phase')})"
    else:
        why = scope.last_error_code or "waiting for the reconciliation"
    when = scope.last_complete_at
    return f"{why}; last complete {when}" if when else f"{why}; never complete yet"


def _incomplete(console: Console) -> list[tuple[str, str]]:
    """Each scope whose coverage is not complete, and why (with when it last was)."""
    status = console.index.status()
    return [
        (s.slug if s.kind == "content" else s.kind, f"{s.coverage}: {_why(s)}")
        for s in status.collections + status.sources
        if s.coverage != "complete"
    ]


def _unused_routes(router: APIRouter, console: Console) -> None:
    @router.get("/unused")
    def unused(
        request: Request, type: str = "", older_than: str = "", trashed: str = "",
        cursor: str | None = None,
    ) -> Response:  # fmt: skip
        if (refused := console.reader(request)) is not None:
            return refused
        days = whole_days(older_than or None, "older_than")
        prefix = type if type in dict(TYPES) else ""
        page = console.index.unused(
            PAGE, cursor, older_than=days, mime_prefix=prefix or None,
            include_trashed_only=trashed == "1",
        )  # fmt: skip
        chosen = {"type": prefix, "older_than": days, "trashed": trashed == "1"}
        query = {k: v for k, v in (("type", prefix), ("older_than", older_than),
                                   ("trashed", trashed)) if v}  # fmt: skip
        back = "/console/unused" + ("?" + urlencode(query) if query else "")
        next_href = "/console/unused?" + urlencode({**query, "cursor": page.next_cursor or ""})
        incomplete = [] if page.known else _incomplete(console)
        return console.page(
            request, "unused.html", "Unused media", page=page, chosen=chosen, types=TYPES,
            back=back, next_href=next_href, incomplete=incomplete,
            thumb=console.render.thumbnail_url, bytes=shown_bytes, age=shown_age,
        )  # fmt: skip

    @router.post("/unused/preview")
    async def preview(request: Request) -> Response:
        form, refused = await console.operator(request)
        if refused is not None:
            return refused
        ids = form.many("shown") if form.one("all_shown") == "1" else form.many("id")
        back = safe_next(form.one("back") or "/console/unused")
        if not ids:
            return console.page(request, "message.html", "Nothing selected",
                                message="Tick the items to retire, or \u201cAll shown\u201d.",
                                next_href=back, next_label="Back to the list")  # fmt: skip
        result = await run_in_threadpool(
            cleanup.retire, console.engine, ids, actor=ACTOR, dry_run=True
        )
        return console.page(request, "preview.html", "Retire: preview", result=result, back=back)

    @router.post("/unused/retire")
    async def retire(request: Request) -> Response:
        form, refused = await console.operator(request)
        if refused is not None:
            return refused
        reason = (form.one("reason") or "unused").strip() or "unused"
        result = await run_in_threadpool(
            cleanup.retire, console.engine, form.many("id"), actor=ACTOR, reason=reason
        )
        done = "retired" if result.retired else "none_retired"
        return RedirectResponse(f"/console/quarantine?done={done}", status_code=303)


def _media_routes(router: APIRouter, console: Console) -> None:
    # ``:path``: a media id may hold "/" (a folder-like storage id).
    @router.get("/media/{media_id:path}/file")
    def media_file(request: Request, media_id: str) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        item = console.index.media_item(media_id)
        return thumbnail_response(item, console.settings.storage_dir)

    @router.get("/media/{media_id:path}")
    def media_page(request: Request, media_id: str, cursor: str | None = None) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        usage = console.index.usage(media_id, cursor=cursor)
        uses = [
            (entry, source["variant"], occurrence)
            for entry in usage.entries
            for source in entry.sources or [{"variant": None, "occurrences": [None]}]
            for occurrence in source["occurrences"] or [None]
        ]
        return console.page(
            request, "media.html", f"Media {media_id}", item=console.index.media_item(media_id),
            usage=usage, uses=uses, history=console.index.history(media_id),
            thumb=console.render.thumbnail_url, bytes=shown_bytes, admin=_admin_link(console),
        )  # fmt: skip


def _admin_link(console: Console) -> Callable[[UsageEntry], str | None]:
    template = console.settings.admin_url

    def link(entry: UsageEntry) -> str | None:
        if template is None or entry.kind != "content":
            return None
        return template.replace("{collection}", quote(entry.collection, safe="")).replace(
            "{id}", quote(entry.content_id, safe="")
        )

    return link


def _quarantine_routes(router: APIRouter, console: Console) -> None:
    @router.get("/quarantine")
    def quarantine(
        request: Request, days: str = "", before_at: str = "", before_id: str = ""
    ) -> Response:
        if (refused := console.reader(request)) is not None:
            return refused
        before = (before_at, before_id) if before_at and before_id else None
        items = console.index.quarantined(PAGE, before)
        next_href = None
        if len(items) == PAGE:
            last = items[-1]
            next_href = "/console/quarantine?" + urlencode(
                {"before_at": last.retired_at or "", "before_id": last.id}
            )
        values: dict[str, Any] = {
            "items": items, "next_href": next_href, "days": None, "preview": None,
            "purge_problem": None, "sweep": [],
        }  # fmt: skip
        if days:
            values.update(_purge_preview(console, whole_days(days, "days")))
        return console.page(request, "quarantine.html", "Quarantine", **values)

    @router.post("/quarantine/restore")
    async def restore(request: Request) -> Response:
        form, refused = await console.operator(request)
        if refused is not None:
            return refused
        result = await run_in_threadpool(
            cleanup.restore, console.engine, form.many("id"), actor=ACTOR
        )
        done = "restored" if result.restored else "not_restored"
        return RedirectResponse(f"/console/quarantine?done={done}", status_code=303)


def _purge_preview(console: Console, days: int | None) -> dict[str, Any]:
    """A dry run of the purge, the final sweep included: what it would purge, what it would
    keep and why, and how much of each table the sweep read."""
    swept: dict[str, int] = {}
    try:
        preview = purge(
            console.engine, days if days is not None else 0, actor=ACTOR,
            target=console.settings.purge, dry_run=True,
            progress=lambda table, count: swept.__setitem__(table, count),
        )  # fmt: skip
    except MediaUsageError as exc:
        return {"days": days, "preview": None, "purge_problem": str(exc)}
    return {"days": days, "preview": preview, "sweep": sorted(swept.items())}
