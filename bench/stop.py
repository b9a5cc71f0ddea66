"""How long Ctrl-C takes to stop `gateway run` and `gateway chat` in a real terminal.

    .venv/bin/python bench/stop.py [--runs 5]

Each command is started under a pseudo-terminal on a fresh data directory
(the offline echo model, the HTTP server on a free port), its prompt or banner
is awaited, then Ctrl-C is typed (the terminal driver turns it into SIGINT for
the foreground process group) and the time until the process has exited is
taken. The figure the operator feels is the median; the worst run is printed
too. The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = {"run": b"stop with Ctrl-C", "chat": b""}


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty (its stdin)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def stop_time(command: str, root: Path) -> float:
    """Seconds from Ctrl-C to the exit of ``gateway <command>`` under a pty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_DATA_DIR=str(root / "data"), GATEWAY_HTTP__PORT="0")
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", command],
        stdin=follower, stdout=follower, stderr=subprocess.DEVNULL,
        cwd=root, env=env, preexec_fn=_own_terminal,
    )  # fmt: skip
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while READY[command] not in seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway {command} did not start: {seen[-300:]!r}")
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                seen += os.read(leader, 4096)
        if command == "chat":  # the chat is up once it has answered a line
            os.write(leader, b"hello\r")
            while seen.count(b"hello") < 2:  # the line as typed, then the echo model's answer
                seen += os.read(leader, 4096)
        started = time.perf_counter()
        os.write(leader, b"\x03")
        process.wait(timeout=60)
        return time.perf_counter() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, float] = {}
    for command in ("run", "chat"):
        times = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                times.append(stop_time(command, Path(tmp)))
        figures[f"ctrl_c_stop_ms_{command}_p50"] = round(statistics.median(times) * 1000, 1)
        figures[f"ctrl_c_stop_ms_{command}_max"] = round(max(times) * 1000, 1)
        print(f"gateway {command}: {figures[f'ctrl_c_stop_ms_{command}_p50']} ms", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
