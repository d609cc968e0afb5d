"""Clean-up's pure rules: which files a purge may delete, and what a listing or a retirement
accepts before any statement runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from media_usage_worker.domain.cleanup import (
    FENCE_BATCH,
    MAX_IDS,
    UnusedFilter,
    batches,
    checked_ids,
    file_under,
)
from media_usage_worker.domain.errors import InvalidArgument


def test_a_storage_key_names_a_file_under_the_directory_or_nothing(tmp_path: Path) -> None:
    root = (tmp_path / "files").resolve()
    (root / "2024").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    assert file_under(root, "a.png") == root / "a.png"
    assert file_under(root, "2024/b.png") == root / "2024" / "b.png"
    for bad in ("", "/etc/passwd", "../x", "2024/../../x", "a\x00b", "link/x", ".", None, 3):
        assert file_under(root, bad) is None, bad


def test_a_selection_is_checked_before_it_is_used() -> None:
    assert UnusedFilter(30, "image/").validated() == UnusedFilter(30, "image/")
    for bad in (
        UnusedFilter(-1), UnusedFilter(True), UnusedFilter(10**6), UnusedFilter(None, ""),
        UnusedFilter(None, "x" * 101), UnusedFilter(None, "imäge/"), UnusedFilter(None, None, 1),
    ):  # fmt: skip
        with pytest.raises(InvalidArgument):
            bad.validated()


def test_ids_are_checked_and_cut_into_fenced_batches() -> None:
    assert checked_ids(["a", "b", "a"]) == ["a", "b"]
    for bad in ([], "abc", ["ok", ""], ["x" * 2000], list(map(str, range(MAX_IDS + 1)))):
        with pytest.raises(InvalidArgument):
            checked_ids(bad)
    ids = [str(n) for n in range(250)]
    assert [len(b) for b in batches(ids)] == [FENCE_BATCH, FENCE_BATCH, 50]
