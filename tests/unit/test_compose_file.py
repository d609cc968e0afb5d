"""docker-compose.yml holds to what production needs: pinned images, no default password,
ports on loopback unless the operator says otherwise, rotated logs, no needless dependency."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docker-compose.yml").read_text()
SERVICES = yaml.safe_load(TEXT)["services"]
LOCAL_IMAGE = "media-usage-worker:local"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_image_is_pinned_to_an_exact_version(name: str) -> None:
    image = SERVICES[name]["image"]
    if image == LOCAL_IMAGE:
        return
    assert re.fullmatch(r"[a-z0-9/_.-]+:\d+\.\d+(\.\d+)?(-[a-z0-9]+)?", image), image


def test_the_image_base_is_pinned() -> None:
    (base,) = re.findall(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base


def test_the_database_password_has_no_default() -> None:
    uses = re.findall(r"\$\{POSTGRES_PASSWORD([^}]*)\}", TEXT)
    assert len(uses) >= 2
    assert all(use.startswith(":?") for use in uses), uses


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if "ports" in SERVICES[n]))
def test_published_ports_bind_loopback_by_default(name: str) -> None:
    for port in SERVICES[name]["ports"]:
        assert re.fullmatch(r"\$\{\w+_BIND:-127\.0\.0\.1\}:\d+:\d+", str(port)), port


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_rotates_its_log(name: str) -> None:
    logging = SERVICES[name]["logging"]
    assert logging["driver"] == "json-file"
    assert {"max-size", "max-file"} <= set(logging["options"])


def test_the_api_does_not_wait_for_the_broker() -> None:
    assert "redis" not in SERVICES["api"]["depends_on"]
    assert {"postgres", "migrate"} <= set(SERVICES["api"]["depends_on"])


def test_the_documented_stack_can_purge() -> None:
    """The API deletes purged files under the site's media folder, mounted from MEDIA_DIR; an
    operator who hands them to a host task empties MEDIA_USAGE_STORAGE_DIR instead."""
    api = SERVICES["api"]
    assert api["environment"]["MEDIA_USAGE_STORAGE_DIR"] == "${MEDIA_USAGE_STORAGE_DIR-/srv/media}"
    assert api["volumes"] == ["${MEDIA_DIR:-./media}:/srv/media"]


def test_flower_is_optional() -> None:
    assert SERVICES["flower"]["profiles"] == ["flower"]
    # A site without Flower sets nothing for it (compose checks `:?` in every service).
    assert not re.search(r"\$\{FLOWER_\w*:\?", TEXT)
