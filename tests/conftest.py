"""Shared test helpers: service availability and the CI rule for skipping."""

from __future__ import annotations

import os
import socket

import pytest


def service_up(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a service is absent, except in CI, where its absence is a failure."""
    if service_up(host, port):
        return
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not reachable at {host}:{port}, and CI requires it")
    pytest.skip(f"{name} is not running at {host}:{port} (set CI=1 to make this a failure)")
