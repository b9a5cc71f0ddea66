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


def modules(root: Path = CRON) -> list[Path]:
    """Every module of the package, its subpackages' included."""
    return sorted(root.rglob("*.py"))


def test_cron_never_imports_gateway_or_channels() -> None:
    for path in modules():
        assert not imported_roots(path) & {"gateway", "channels"}, path.relative_to(CRON)


def test_only_the_service_its_scheduler_and_its_triggers_import_apscheduler() -> None:
    importers = {
        path.relative_to(CRON).as_posix()
        for path in modules()
        if "apscheduler" in imported_roots(path)
    }
    assert importers == {"service.py", "scheduler.py", "triggers.py"}


def test_an_apscheduler_import_in_a_subpackage_is_found(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "sub" / "timers.py").write_text(
        "from apscheduler.triggers.cron import CronTrigger\n", encoding="utf-8"
    )
    found = [p for p in modules(tmp_path) if "apscheduler" in imported_roots(p)]
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["sub/timers.py"]
