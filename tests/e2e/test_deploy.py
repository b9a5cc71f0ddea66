"""What docs/operators.md ships: a systemd unit systemd accepts, a Dockerfile that builds and runs.

The image is built only where a Docker engine answers (``docker info``); a
``docker`` client with no engine behind it skips, like a machine without one.
"""

from __future__ import annotations

import getpass
import grp
import os
import secrets
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "gateway.service"
INSTALLED = "/opt/chat-gateway"


def unit_here(tmp_path: Path) -> Path:
    """The unit with its paths and user pointed at this checkout, as an operator would edit it."""
    user = getpass.getuser()
    group = grp.getgrgid(os.getgid()).gr_name
    text = UNIT.read_text().replace(INSTALLED, str(ROOT))
    text = text.replace("User=gateway", f"User={user}").replace("Group=gateway", f"Group={group}")
    path = tmp_path / "gateway.service"
    path.write_text(text)
    return path


def test_the_systemd_unit_runs_the_gateway_from_the_checkout_after_checking_its_config() -> None:
    lines = UNIT.read_text().splitlines()
    assert f"ExecStart={INSTALLED}/.venv/bin/gateway run --log-level info" in lines
    assert f"ExecStartPre={INSTALLED}/.venv/bin/gateway config check" in lines
    assert f"WorkingDirectory={INSTALLED}" in lines
    assert f"ReadWritePaths={INSTALLED}/data" in lines
    stop = next(int(line.split("=")[1]) for line in lines if line.startswith("TimeoutStopSec="))
    assert stop > 10  # longer than the default close_deadline_seconds


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "gateway").exists():
        pytest.skip("no .venv/bin/gateway in this checkout")
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit_here(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "gateway.service" not in result.stderr, result.stderr


def test_the_image_holds_every_package_the_project_installs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile, package
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {"data", "gateway.toml", ".venv"} <= set(ignored)


def docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_image_builds_and_its_gateway_checks_its_config_and_reports_its_version() -> None:
    if not docker_engine():
        pytest.skip("no Docker engine answers `docker info` here")
    tag = f"chat-gateway-test:{secrets.token_hex(4)}"
    build = subprocess.run(
        ["docker", "build", "-t", tag, str(ROOT)], capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stderr[-4000:]
    try:
        version = subprocess.run(
            ["docker", "run", "--rm", tag, "gateway", "--version"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert version.returncode == 0, version.stderr
        assert version.stdout.startswith("gateway ")
        check = subprocess.run(
            ["docker", "run", "--rm", tag, "gateway", "config", "check"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert check.returncode == 0, check.stderr
        assert check.stdout.strip() == "the default configuration: ok"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
