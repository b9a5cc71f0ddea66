"""The terminal commands stop cleanly: Ctrl-C, SIGTERM, and a gateway that goes away.

The commands run as real processes; Ctrl-C is ``\\x03`` written to their
pseudo-terminal, so the terminal driver sends the SIGINT (see
``terminal_driver``). The offline ``echo`` model answers; a turn that must
stay in flight talks to a model server that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.terminal import first_of, input_lines
from tests.gateway.terminal_driver import (
    READY_WITHIN,
    STOP_WITHIN,
    Background,
    Terminal,
    gateway_env,
)

BANNER = "stop with Ctrl-C"


@pytest.fixture
def processes() -> Iterator[list[Terminal | Background]]:
    """Every process a test starts, killed at its end if it is still running."""
    started: list[Terminal | Background] = []
    yield started
    for process in started:
        process.close()


@pytest.fixture
def silent_model() -> Iterator[socket.socket]:
    """A model server that takes connections and never answers: a turn on it stays running."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def model_env(tmp_path: Path, server: socket.socket, **settings: str) -> dict[str, str]:
    port = server.getsockname()[1]
    return gateway_env(
        tmp_path,
        GATEWAY_MODELS__DEFAULT="silent/model",
        GATEWAY_MODELS__PROVIDERS__SILENT__BASE_URL=f"http://127.0.0.1:{port}/v1",
        GATEWAY_MODELS__PROVIDERS__SILENT__API_KEY="not-a-secret",
        **settings,
    )


def asked(server: socket.socket) -> None:
    """Wait until the gateway has called the model (its connection waits to be accepted)."""
    assert select.select([server], [], [], READY_WITHIN)[0], "the model was never called"


def no_traceback(process: Terminal | Background) -> None:
    assert "Traceback" not in process.stderr, process.stderr


def start_gateway(
    tmp_path: Path, processes: list[Terminal | Background], **settings: str
) -> Background:
    gateway = Background(["run"], cwd=tmp_path, env=gateway_env(tmp_path, **settings))
    processes.append(gateway)
    gateway.expect(BANNER)
    return gateway


# --- Ctrl-C in a terminal -----------------------------------------------------------------


def test_ctrl_c_stops_gateway_run_while_it_waits_for_typed_input(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    run = Terminal(["run"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(run)
    seen = run.expect(BANNER)
    run.type("ping from the terminal")
    run.expect("ping from the terminal", after=seen)  # the reader took it and waits again
    run.ctrl_c()
    assert run.ended_within(STOP_WITHIN) == 0
    no_traceback(run)


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None and not os.environ.get("CI"), reason="needs make")
def test_ctrl_c_stops_make_run_and_the_gateway_it_started(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    run = Terminal(
        ["run"], cwd=tmp_path, env=gateway_env(tmp_path), program=["make", "-s", "-C", str(ROOT)]
    )
    processes.append(run)
    run.expect(BANNER)
    run.ctrl_c()
    run.ended_within(STOP_WITHIN)  # make itself ends on the interrupt
    assert run.closed_within(STOP_WITHIN), "the gateway make started still holds the terminal"
    no_traceback(run)
    assert "Traceback" not in run.text


def test_ctrl_c_stops_an_in_process_gateway_chat(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    chat = Terminal(["chat"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(chat)
    chat.type("hello in process")
    chat.expect("hello in process")
    chat.ctrl_c()
    assert chat.ended_within(STOP_WITHIN) == 0
    no_traceback(chat)


def test_ctrl_c_stops_an_attached_gateway_chat_and_leaves_the_gateway_running(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    gateway = start_gateway(tmp_path, processes)
    chat = Terminal(["chat"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(chat)
    chat.type("hello attached")
    chat.expect("hello attached")
    chat.ctrl_c()
    assert chat.ended_within(STOP_WITHIN) == 0
    no_traceback(chat)
    assert gateway.process.poll() is None
    gateway.signal(signal.SIGTERM)
    assert gateway.ended_within(STOP_WITHIN) == 0
    no_traceback(gateway)


def test_ctrl_d_ends_an_in_process_gateway_chat_after_its_answers(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    chat = Terminal(["chat"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(chat)
    chat.type("last words")
    chat.ctrl_d()
    assert chat.ended_within(READY_WITHIN) == 0
    assert "last words" in chat.text
    no_traceback(chat)


# --- SIGTERM, and the gateway going away ----------------------------------------------------


def test_sigterm_stops_an_in_process_gateway_chat(
    tmp_path: Path, processes: list[Terminal | Background]
) -> None:
    chat = Terminal(["chat"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(chat)
    chat.type("hello")
    chat.expect("hello")
    chat.signal(signal.SIGTERM)
    assert chat.ended_within(STOP_WITHIN) == 0
    no_traceback(chat)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_the_gateway_mid_turn_ends_an_attached_chat_with_one_line_and_exit_1(
    tmp_path: Path, processes: list[Terminal | Background], sig: signal.Signals
) -> None:
    gateway = start_gateway(tmp_path, processes)
    chat = Terminal(["chat"], cwd=tmp_path, env=gateway_env(tmp_path))
    processes.append(chat)
    chat.type("first")
    chat.expect("first")
    chat.type("second, in flight when the gateway stops")
    gateway.signal(sig)
    assert gateway.ended_within(STOP_WITHIN) == 0
    no_traceback(gateway)
    assert chat.ended_within(STOP_WITHIN) == 1
    # One line: the connection closed under it, or its line came as the gateway stopped.
    assert chat.stderr.strip().splitlines() in (
        ["error: the gateway went away (it closed the control connection)"],
        ["error: the gateway is stopping and took no more lines"],
    )


# --- a turn in flight ------------------------------------------------------------------------


def turn_in_flight(
    command: str,
    tmp_path: Path,
    processes: list[Terminal | Background],
    silent_model: socket.socket,
    deadline: str,
) -> Terminal:
    """``gateway COMMAND`` in a terminal, with a typed question the model never answers."""
    env = model_env(tmp_path, silent_model, GATEWAY_THREADS__CLOSE_DEADLINE_SECONDS=deadline)
    terminal = Terminal([command], cwd=tmp_path, env=env)
    processes.append(terminal)
    if command == "run":
        terminal.expect(BANNER)
    terminal.type("a question the model never answers")
    asked(silent_model)
    return terminal


def test_a_stop_gives_a_running_turn_the_close_deadline_then_ends_without_a_traceback(
    tmp_path: Path, processes: list[Terminal | Background], silent_model: socket.socket
) -> None:
    run = turn_in_flight("run", tmp_path, processes, silent_model, deadline="0.5")
    run.signal(signal.SIGTERM)
    assert run.ended_within(0.5 + STOP_WITHIN) == 0
    no_traceback(run)


@pytest.mark.parametrize("command", ["run", "chat"])
def test_ctrl_c_gives_a_running_turn_a_moment_not_the_whole_close_deadline(
    command: str,
    tmp_path: Path,
    processes: list[Terminal | Background],
    silent_model: socket.socket,
) -> None:
    terminal = turn_in_flight(command, tmp_path, processes, silent_model, deadline="600")
    terminal.ctrl_c()
    assert terminal.ended_within(STOP_WITHIN) == 0  # not the 600 s a SIGTERM would give it
    no_traceback(terminal)


def test_a_second_ctrl_c_stops_at_once_while_a_turn_runs(
    tmp_path: Path, processes: list[Terminal | Background], silent_model: socket.socket
) -> None:
    run = turn_in_flight("run", tmp_path, processes, silent_model, deadline="600")
    run.signal(signal.SIGTERM)  # a service manager's stop: the whole close deadline
    deadline = time.monotonic() + READY_WITHIN
    while "press Ctrl-C again" not in run.stderr:
        assert time.monotonic() < deadline, run.stderr
        assert run.process.poll() is None, run.stderr
        select.select([], [], [], 0.05)  # polling the stderr file with a deadline
    assert "running turns have up to 600 s to finish" in run.stderr
    run.ctrl_c()
    assert run.ended_within(STOP_WITHIN) == 128 + signal.SIGINT
    no_traceback(run)


# --- reading input without a thread -----------------------------------------------------------


async def lines_of(fd: int) -> list[str]:
    return [line async for line in input_lines(fd)]


async def test_lines_come_from_a_pipe_with_a_last_line_lacking_its_newline() -> None:
    read, write = os.pipe()
    try:
        os.write(write, b"one\ntwo\nthree")
        os.close(write)
        assert await lines_of(read) == ["one\n", "two\n", "three"]
        assert os.get_blocking(read), "the pipe is put back as it was"
    finally:
        os.close(read)


async def test_lines_come_from_a_regular_file_and_from_dev_null(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes("first\nsecond \xff\n".encode("latin-1"))
    with path.open("rb") as file:
        assert await lines_of(file.fileno()) == ["first\n", "second \ufffd\n"]
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        assert await lines_of(null) == []
    finally:
        os.close(null)


async def test_a_closed_descriptor_is_an_empty_input() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    assert await lines_of(read) == []


async def test_waiting_for_a_line_is_cancelled_at_once_with_no_thread_left_behind() -> None:
    read, write = os.pipe()
    try:
        reading = asyncio.ensure_future(lines_of(read))
        await asyncio.sleep(0)  # let it start waiting
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert not asyncio.get_running_loop().remove_reader(read), "the loop stopped watching"
    finally:
        os.close(read)
        os.close(write)


async def test_first_of_raises_the_error_of_the_one_that_ended_and_cancels_the_rest() -> None:
    cancelled = asyncio.Event()

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def fails() -> None:
        raise LookupError("this one ended first")

    with pytest.raises(LookupError, match="ended first"):
        await first_of(waits(), fails())
    assert cancelled.is_set()
