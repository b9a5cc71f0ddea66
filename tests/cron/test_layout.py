"""The package's boundaries: imports flow config ← threads ← cron ← gateway."""

from __future__ import annotations

import ast
from pathlib import Path

CRON = Path(__file__).resolve().parents[2] / "cron"


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_cron_never_imports_gateway_or_channels() -> None:
    for path in CRON.glob("*.py"):
        assert not imported_roots(path) & {"gateway", "channels"}, path.name


def test_only_the_service_module_imports_apscheduler() -> None:
    importers = {p.name for p in CRON.glob("*.py") if "apscheduler" in imported_roots(p)}
    assert importers == {"service.py"}
