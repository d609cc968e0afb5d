"""emdash 0.32.0 installed from the npm registry, with its better-sqlite3 compiled, in
``.ci-cache/emdash-0.32`` of the checkout, and the builder scripts kept beside this project's
peers copied in (tests/acceptance/test_emdash_built_site.py).

``.ci/run`` starts ``python3 -m tests.emdash_builder`` in the background before the suite, so the
minute and a half of npm and the compiler overlaps the other tests; the test's fixture calls
``build()`` too, which waits for a build in progress (a lock file) and does nothing once it is
done. Standard library only: it runs before the project's virtualenv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".ci-cache" / "emdash-0.32"
NATIVE = CACHE / "node_modules/better-sqlite3/build/Release/better_sqlite3.node"
_BESIDE = "shared/peers/emdash/v0.32"


def builder() -> Path | None:
    """The folder holding emdash's site builder (``make-db.mjs``): ``MEDIA_USAGE_EMDASH_BUILDER``,
    else the workspace's shared folder beside this checkout or one of its parents."""
    named = os.environ.get("MEDIA_USAGE_EMDASH_BUILDER")
    candidates = [Path(named)] if named else []
    candidates += [parent / _BESIDE for parent in ROOT.parents] + [Path("/work") / _BESIDE]
    return next((path for path in candidates if (path / "make-db.mjs").is_file()), None)


def _run(command: list[str], cwd: Path, timeout: float) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{command}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def build() -> Path | None:
    """The cache folder, built if it is not yet; ``None`` when the builder is not found."""
    source = builder()
    if source is None:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE.parent / "emdash-0.32.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another build in progress: wait for it
        for script in (*source.glob("*.mjs"), source / "package.json"):
            shutil.copyfile(script, CACHE / script.name)
        if not NATIVE.is_file():
            _run(["npm", "install", "emdash@0.32.0", "--ignore-scripts", "--legacy-peer-deps",
                  "--no-audit", "--no-fund"], CACHE, 600)  # fmt: skip
            # No prebuilt binary is reachable: compile it against the machine's node headers.
            _run(["npx", "--yes", "node-gyp", "rebuild", "--release", "--nodedir=/usr", "-j", "2"],
                 CACHE / "node_modules/better-sqlite3", 900)  # fmt: skip
    return CACHE


if __name__ == "__main__":
    try:
        built = build()
    except Exception as exc:  # the test's own call reports it again, in the test
        print(f"emdash builder: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"emdash builder: {built or 'no builder found'}")
