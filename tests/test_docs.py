"""The docs a user of the repository reads point only at what the repository holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTSIDE = re.compile(r"\bseeds?\b|\bseed-\d|DESIGN §|DESIGN\.md|STYLE\.md|\.\./shared", re.I)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [*PAGES, ROOT / "gateway.example.toml"], ids=lambda p: p.name)
def test_a_page_cites_nothing_outside_the_repository(page: Path) -> None:
    found = [
        f"{page.name}:{number}: {line.strip()}"
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_on_a_page_names_a_file_in_the_repository(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            broken.append(target)
    assert broken == []


def test_the_readme_sets_up_with_exactly_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in quickstart.splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]


def test_the_operators_guide_covers_systemd_containers_backups_logs_and_upgrades() -> None:
    guide = (ROOT / "docs" / "operators.md").read_text()
    for heading in (
        "## Running under systemd",
        "## In a container",
        "## Backups",
        "## Logs",
        "## Upgrading",
        "## JSON output",
    ):
        assert heading in guide
    assert "deploy/gateway.service" in guide
    assert "Dockerfile" in guide
