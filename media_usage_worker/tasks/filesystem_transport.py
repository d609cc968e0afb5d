"""kombu's server-less ``filesystem://`` transport, made safe for the embedded default.

kombu writes a message file in place under its final name, and its reader may take the file
before the writer has finished it: the reader then decodes a torn or empty file and raises
inside the consumer's loop, which Celery treats as unrecoverable, and the worker dies. An empty
or foreign ``.msg`` file in the folder does the same every time. Here:

- a message is written whole or not at all: under a hidden temporary name, then renamed to its
  final name (an atomic rename in the same folder);
- a reader claims a file by renaming it to a hidden name in the same folder (one reader wins)
  and waits for the lock kombu's own writer holds while it writes (a host that still uses plain
  kombu); an empty file younger than ``EMPTY_GRACE_SECONDS`` goes back for a later look (its
  writer may be between creating and locking it), and the reader moves on;
- a file that still cannot be read as a message (empty, not JSON, not a kombu envelope) is
  moved aside to ``rejected/`` beside the queue folder, with one WARNING line and the dropped
  messages metric, and the loop goes on. Nothing is lost that matters: the database holds the
  work, and the next tick sends it again.

``tasks.app`` uses this transport for ``filesystem://`` broker URLs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from media_usage_worker.domain.errors import InvalidMessage
from media_usage_worker.tasks.consumer import dropped
from media_usage_worker.tasks.envelope import check_envelope

log = logging.getLogger("media_usage.messages")

# How long an empty message file is left to its writer, which may have created it but not yet
# locked it (kombu's own writer opens, then locks, then writes); older, it is set aside.
EMPTY_GRACE_SECONDS = 2.0
REJECTED_FOLDER = "rejected"


def _set_aside(path: str, name: str, reason: str) -> None:
    """Move an unreadable message file to ``rejected/`` beside the queue folder; one line."""
    folder = os.path.join(os.path.dirname(os.path.dirname(path)), REJECTED_FOLDER)
    dropped.add(reason)
    try:
        os.makedirs(folder, exist_ok=True)
        os.replace(path, os.path.join(folder, name))
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(path)
    log.warning("set aside broker file %s: %s", name, reason)


class GuardedFilesystemChannel(filesystem.Channel):
    # kombu's two base classes name the second parameter differently (message, payload).
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot: no reader takes it for a message of any queue while it is written.
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise ChannelError(f"Cannot add file {name!r} to the queue folder") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            message = self._take(name)
            if message is not None:
                return message
        raise Empty()

    def _take(self, name: str) -> Any:
        """The message of the file ``name`` once this reader has claimed it; ``None`` when
        another reader took it, when it is empty but young (a writer may be between creating
        and locking it: it goes back, for a later look), or when it could not be read (then it
        is set aside)."""
        path = os.path.join(self.data_folder_in, name)
        claimed = os.path.join(self.data_folder_in, f".claimed-{uuid.uuid4().hex}-{name}")
        try:
            os.rename(path, claimed)
        except OSError:
            return None  # another reader claimed it first, or it is gone
        payload, age = _read_whole(claimed)
        if not payload and age < EMPTY_GRACE_SECONDS:
            with contextlib.suppress(OSError):
                os.rename(claimed, path)
            return None
        try:
            message = loads(bytes_to_str(payload)) if payload else None
        except (ValueError, TypeError, RecursionError, UnicodeDecodeError):
            message = None
        if not isinstance(message, dict):
            why = "an empty file" if not payload else "not a JSON object"
            _set_aside(claimed, name, f"the broker file is {why}")
            return None
        self._done_with(claimed, name)
        return message

    def _done_with(self, claimed: str, name: str) -> None:
        try:
            if self.store_processed:
                os.replace(claimed, os.path.join(self.processed_folder, name))
            else:
                os.remove(claimed)
        except OSError as exc:
            raise ChannelError(f"Cannot remove file {name!r} from the queue") from exc


def _read_whole(path: str) -> tuple[bytes, float]:
    """The file's bytes once no writer holds its lock (kombu's own writer locks while it
    writes), and its age in seconds."""
    try:
        with open(path, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH)  # waits for a writer in the act
            payload = handle.read()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return payload, time.time() - os.fstat(handle.fileno()).st_mtime
    except OSError:
        return b"", EMPTY_GRACE_SECONDS


class GuardedFilesystemTransport(filesystem.Transport):
    Channel = GuardedFilesystemChannel

    @property
    def default_connection_params(self) -> dict[str, Any]:
        # A folder has no host: without this, kombu warns "No hostname was supplied" each
        # time it builds the connection's details.
        return {"port": self.default_port, "hostname": None}

    def _deliver(self, message: Any, queue: Any) -> None:
        try:
            check_envelope(message)
        except InvalidMessage as exc:
            dropped.add(str(exc))
            log.warning("dropped broker file message: %s", exc)
            return
        super()._deliver(message, queue)
