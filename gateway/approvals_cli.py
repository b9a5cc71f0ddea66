"""``gateway approvals …``: the tool calls that wait for a person, decided from a terminal.

    list [--json]                  what waits: id, tool, arguments, where, until when
    approve ID [--always]          let the call run (and, --always, the same call from now on)
    deny ID [--reason TEXT]        refuse it; the agent reads "DENIED: TEXT"
    grants [--key KEY] [--json]    the standing approvals "Always" made
    revoke GRANT                   end one: the next such call asks again

Pending requests live in the running gateway's sessions, so ``list``,
``approve`` and ``deny`` go through its control socket (no gateway running is
an error saying so). The terminal is an operator's door: it may decide any
request, and the session's trail records the decision as ``cli (<user>)``.
An ID may be shortened to any unique prefix of six characters or more.
``grants`` and ``revoke`` work on the state store itself when no gateway runs.

Exit codes: 0 done; 1 the call failed (no gateway, no such request or grant,
a configuration that does not load) — one line naming what was wrong; 2 the
command line is wrong.
"""

from __future__ import annotations

import asyncio
import getpass
from datetime import datetime
from typing import Annotated, Any

import orjson
import typer

from config import GatewayConfig
from gateway.cli_kit import App, ConfigOption, JsonOption, fail, load, print_json
from gateway.errors import ControlError
from gateway.ops_cli import ask, no_gateway
from threads.approvals.errors import ApprovalError
from threads.approvals.grants import GrantBook
from threads.state import StateStoreError, open_state_store

app = App(
    name="approvals",
    help="Tool calls waiting for a person: list, approve, deny; grants made with Always.",
)
IdArgument = Annotated[str, typer.Argument(help="the request id (`gateway approvals list`)")]
ARGS_WIDTH = 72


@app.command("list")
def list_requests(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """The tool calls waiting for a decision, oldest first."""
    answer = _gateway(load(config), "approvals_list", {})
    if as_json:
        print_json({"requests": answer["requests"]})
        return
    typer.echo("\n".join(request_lines(answer["requests"])))


@app.command()
def approve(
    request: IdArgument,
    always: Annotated[
        bool, typer.Option("--always", help="also let the same call run unasked from now on")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Let the waiting call run; the turn goes on."""
    answer = _decide(load(config), request, approve=True, always=always)
    typer.echo(decision_line(answer["decision"]))


@app.command()
def deny(
    request: IdArgument,
    reason: Annotated[
        str, typer.Option("--reason", help="what the agent is told after DENIED:")
    ] = "",
    config: ConfigOption = None,
) -> None:
    """Refuse the waiting call; the agent is told, and the turn goes on without it."""
    answer = _decide(load(config), request, approve=False, reason=reason)
    typer.echo(decision_line(answer["decision"]))


@app.command()
def grants(
    key: Annotated[
        str | None, typer.Option("--key", help="only this conversation's, e.g. telegram:123")
    ] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """The standing approvals made with Always, per conversation."""
    settings = load(config)

    async def offline(book: GrantBook) -> dict[str, Any]:
        found = await (book.of_key(key) if key else book.all())
        return {"grants": [g.wire() for g in found]}

    answer = _with_grants(settings, "approvals_grants", {"key": key}, offline)
    if as_json:
        print_json({"grants": answer["grants"]})
        return
    typer.echo("\n".join(grant_lines(answer["grants"])))


@app.command()
def revoke(
    grant: Annotated[str, typer.Argument(help="the grant id (`gateway approvals grants`)")],
    config: ConfigOption = None,
) -> None:
    """End a grant: the next such call asks a person again."""

    async def offline(book: GrantBook) -> dict[str, Any]:
        return {"grant": (await book.revoke(grant)).wire()}

    answer = _with_grants(load(config), "approvals_revoke", {"grant": grant}, offline)
    revoked = answer["grant"]
    typer.echo(f"revoked {revoked['id']}: {revoked['label']} in {revoked['key']} asks again")


# --- text --------------------------------------------------------------------------------


def request_lines(requests: list[dict[str, Any]]) -> list[str]:
    if not requests:
        return ["nothing waits for a decision"]
    lines = [f"{len(requests)} tool call{'s' if len(requests) != 1 else ''} wait for a decision"]
    for r in requests:
        caller = r.get("caller") or {}
        asked = f", asked by {caller.get('name') or caller.get('user_id')}" if caller else ""
        lines.append(f"{r['id']}  {r['tool']} in {r['session_key']}{asked}")
        lines.append(f"    {_clip(orjson.dumps(r.get('args') or {}).decode(), ARGS_WIDTH)}")
        when = f"    waiting since {_when(r['created'])}"
        if r.get("expiry"):
            when += f", denied if undecided by {_when(r['expiry'])}"
        lines.append(when)
    return lines


def decision_line(decision: dict[str, Any]) -> str:
    tool, key = decision["tool"], decision["session_key"]
    if decision["outcome"] == "approve":
        also = "; the same call now runs unasked there" if decision.get("always") else ""
        return f"approved {decision['id']}: {tool} runs in {key}{also}"
    return f"denied {decision['id']}: {tool} in {key} is not run ({decision['reason']})"


def grant_lines(found: list[dict[str, Any]]) -> list[str]:
    if not found:
        return ["no grants (Always on an approval makes one)"]
    lines = []
    for g in found:
        tests = ", ".join(orjson.dumps(a).decode() for a in g.get("args", [])) or "any arguments"
        lines.append(f"{g['id']}  {g['label']} in {g['key']}")
        lines.append(f"    when {_clip(tests, ARGS_WIDTH)}")
        lines.append(f"    by {g['who']} on {_when(g['created'])}")
    return lines


def _when(iso: str) -> str:
    return f"{datetime.fromisoformat(iso):%Y-%m-%d %H:%M} UTC"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- plumbing ----------------------------------------------------------------------------


def _decide(
    settings: GatewayConfig, request: str, *, approve: bool, always: bool = False, reason: str = ""
) -> dict[str, Any]:
    return _gateway(
        settings,
        "approvals_decide",
        {
            "request": request,
            "approve": approve,
            "always": always,
            "reason": reason,
            "who": getpass.getuser(),
        },
    )


def _gateway(settings: GatewayConfig, op: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``op`` through the running gateway; no gateway running is an error."""

    try:
        answer = asyncio.run(ask(settings, op, **fields))
    except ControlError as exc:
        fail(str(exc))
    if answer is None:
        fail(no_gateway(settings))
    return answer


def _with_grants(settings: GatewayConfig, op: str, fields: dict[str, Any], offline: Any) -> Any:
    """``op`` through the running gateway, else ``offline`` on the state store's grants."""

    async def go() -> dict[str, Any]:
        answer = await ask(settings, op, **fields)
        if answer is not None:
            return answer
        state = await open_state_store(settings.state_store_url())
        try:
            result: dict[str, Any] = await offline(GrantBook(state))
            return result
        finally:
            await state.close()

    try:
        return asyncio.run(go())
    except (ControlError, ApprovalError, StateStoreError) as exc:
        fail(str(exc))
