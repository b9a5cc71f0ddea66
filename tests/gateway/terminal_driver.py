"""Drive ``gateway`` commands as a user would: in a pseudo-terminal, or as a background process.

:class:`Terminal` runs a command with a pseudo-terminal as its controlling
terminal (stdin and stdout on it, stderr kept apart in a file), so that
writing ``\\x03`` makes the terminal driver send SIGINT to it, exactly as
Ctrl-C does. :class:`Background` runs one with no terminal (``gateway run``
under a supervisor). Both read output by polling with a deadline: nothing
here sleeps to wait.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

READY_WITHIN = 30.0
"""Start-up and replies: generous, since a loaded machine imports slowly."""

STOP_WITHIN = 15.0
"""How soon after Ctrl-C or SIGTERM a command must have ended.

The bug this guards against never ended at all (a thread blocked in stdin held
the shutdown); on an idle machine a stop takes well under 2 s (``bench/stop.py``
prints it), but a test that asserts that figure fails on a loaded machine, so
the bound here only tells a stop from a hang.
"""

# A session leader that opens a terminal takes it as its controlling terminal (and its
# process group becomes the terminal's foreground group); then it becomes the command.
_TAKE_TERMINAL = (
    "import os, sys; "
    "os.close(os.open(os.ttyname(0), os.O_RDWR)); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def gateway_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The environment of a gateway on ``tmp_path/data`` with its web chat on a free port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_DATA_DIR"] = str(tmp_path / "data")
    env["GATEWAY_STORE__URL"] = f"jsonl://{tmp_path / 'data' / 'sessions'}"
    env["GATEWAY_HTTP__PORT"] = "0"
    env.update(settings)
    return env


class _Process:
    def __init__(self, process: subprocess.Popen[bytes], stderr: Path) -> None:
        self.process = process
        self._stderr = stderr
        self.output = b""

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")

    @property
    def stderr(self) -> str:
        return self._stderr.read_text(errors="replace")

    def _read_fd(self) -> int:
        raise NotImplementedError

    def expect(self, text: str, within: float = READY_WITHIN, *, after: int = 0) -> int:
        """Wait until ``text`` is in the output past offset ``after``; return where it ends."""
        wanted = text.encode()
        deadline = time.monotonic() + within
        while (found := self.output.find(wanted, after)) < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._read_some(remaining) == b"":
                raise AssertionError(
                    f"{text!r} did not appear within {within} s; output:\n{self.text}\n"
                    f"stderr:\n{self.stderr}"
                )
        return found + len(wanted)

    def _read_some(self, timeout: float) -> bytes | None:
        """What arrives within ``timeout`` (None: nothing yet); empty at the end of the output."""
        ready, _, _ = select.select([self._read_fd()], [], [], timeout)
        if not ready:
            return None
        try:
            chunk = os.read(self._read_fd(), 4096)
        except OSError:  # EIO: every holder of the terminal's other side closed it
            return b""
        self.output += chunk
        return chunk

    def signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def ended_within(self, seconds: float = STOP_WITHIN) -> int:
        """The exit code, which the process must have within ``seconds``."""
        try:
            code = self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {seconds} s later; output:\n{self.text}\nstderr:\n{self.stderr}"
            ) from None
        self._drain()
        return code

    def _drain(self) -> None:
        while self._read_some(0.5):
            pass

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Terminal(_Process):
    """``gateway <args>`` in a pseudo-terminal, with the terminal's echo off.

    ``program`` runs instead of ``gateway`` (``["make", "run"]``: the args follow it).
    """

    def __init__(
        self,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        program: list[str] | None = None,
    ) -> None:
        command = program or [sys.executable, "-m", "gateway"]
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # only the command's own output comes back
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        stderr = cwd / f"stderr-{len(list(cwd.glob('stderr-*')))}.txt"
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-c", _TAKE_TERMINAL, *command, *args],
                stdin=slave,
                stdout=slave,
                stderr=err,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        os.close(slave)
        self.master = master
        super().__init__(process, stderr)

    def _read_fd(self) -> int:
        return self.master

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def ctrl_d(self) -> None:
        os.write(self.master, b"\x04")

    def closed_within(self, seconds: float = STOP_WITHIN) -> bool:
        """Whether every process holding the terminal (children too) let go of it in time."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self._read_some(remaining) == b"":
                return True
        return False

    def close(self) -> None:
        self.kill()
        os.close(self.master)


class Background(_Process):
    """``gateway <args>`` with no terminal: stdin from ``/dev/null``, stdout a pipe."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        stderr = cwd / f"stderr-{len(list(cwd.glob('stderr-*')))}.txt"
        with stderr.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "gateway", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        super().__init__(process, stderr)

    def _read_fd(self) -> int:
        assert self.process.stdout is not None
        return self.process.stdout.fileno()

    def close(self) -> None:
        self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()
