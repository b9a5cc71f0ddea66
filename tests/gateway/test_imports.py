"""What a gateway imports: the Redis client only when something is configured on Redis."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A fresh interpreter: the test process has imported everything long ago.
STARTS = """
import asyncio, sys
from config import validate
from gateway.app import Gateway
import gateway.cli

async def main() -> None:
    config = validate({"data_dir": sys.argv[1], "http": {"port": 0}}, "test")
    async with Gateway(config, control=False):
        print(sorted(m for m in sys.modules if m == "redis" or m.startswith("redis.")))

asyncio.run(main())
"""


def test_a_gateway_on_files_and_sqlite_never_imports_the_redis_client(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", STARTS, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
