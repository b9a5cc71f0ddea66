"""``gateway pairing …``: who may send the bot direct messages, by pairing code.

    list [--json]               pending requests and paired users, per channel
    approve CHANNEL CODE        pair the user holding CODE; they are told to write again
    deny CHANNEL CODE           drop the request; they are told once
    revoke CHANNEL USER         unpair a user (their next message asks for a code again)

With a gateway running, each command goes through its control socket, so the
running gateway tells the user at once and its in-memory paired set changes
with the store. With none running it works on the state store directly
(``state_store_url()``), so an operator can approve before starting; the
user is then told when the gateway next starts.

Exit codes: 0 done; 1 the call failed (unknown channel, unknown or expired
code, user not paired, store unreachable, a configuration that does not load) —
one line naming what was wrong; 2 the command line is wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

import typer

from channels.errors import PairingError
from channels.pairing import PairingService, listing_json, outcome_json
from config import GatewayConfig
from gateway.cli_kit import App, ConfigOption, JsonOption, fail, load, print_json
from gateway.errors import ControlError
from gateway.ops_cli import ask
from threads.state import StateStoreError, open_state_store

app = App(
    name="pairing",
    help="Approve, deny and revoke who may message the bot directly (pairing codes).",
)
ChannelArgument = Annotated[str, typer.Argument(help="the channel, e.g. telegram or discord")]
CodeArgument = Annotated[str, typer.Argument(help="the 8-character code the user was given")]

Offline = Callable[[PairingService], Awaitable[dict[str, Any]]]


@app.command("list")
def list_pairing(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Pending pairing requests and paired users of every channel with access control."""

    async def offline(service: PairingService) -> dict[str, Any]:
        return listing_json(await service.listing())

    answer = _call(load(config), "pairing_list", {}, offline)
    if as_json:
        print_json({"channels": answer["channels"]})
        return
    typer.echo("\n".join(listing_lines(answer["channels"])))


@app.command()
def approve(channel: ChannelArgument, code: CodeArgument, config: ConfigOption = None) -> None:
    """Pair the user who was given CODE on CHANNEL; they are told to send their message again."""

    async def offline(service: PairingService) -> dict[str, Any]:
        return outcome_json(await service.approve(channel, code))

    answer = _call(load(config), "pairing_approve", {"channel": channel, "code": code}, offline)
    told = "they were told to send their message again" if answer["told"] else _LATER
    typer.echo(f"{channel}: approved {_who(answer['request'])}\n{told}")


@app.command()
def deny(channel: ChannelArgument, code: CodeArgument, config: ConfigOption = None) -> None:
    """Drop the pairing request holding CODE on CHANNEL; its user is told once."""

    async def offline(service: PairingService) -> dict[str, Any]:
        return outcome_json(await service.deny(channel, code))

    answer = _call(load(config), "pairing_deny", {"channel": channel, "code": code}, offline)
    told = "they were told" if answer["told"] else _LATER
    typer.echo(f"{channel}: denied {_who(answer['request'])}\n{told}")


@app.command()
def revoke(
    channel: ChannelArgument,
    user: Annotated[str, typer.Argument(help="the paired user's id on that channel")],
    config: ConfigOption = None,
) -> None:
    """Unpair USER on CHANNEL: their next direct message asks for a new code."""

    async def offline(service: PairingService) -> dict[str, Any]:
        return {"user": (await service.revoke(channel, user)).model_dump(mode="json")}

    answer = _call(load(config), "pairing_revoke", {"channel": channel, "user": user}, offline)
    typer.echo(f"{channel}: unpaired {_who(answer['user'])}")


# --- text ------------------------------------------------------------------------------

_LATER = "they are told when the gateway next runs"


def listing_lines(channels: dict[str, Any]) -> list[str]:
    """The listing as lines of at most 80 columns."""
    if not channels:
        return ["no channel has access control ([channels.<name>.access])"]
    lines: list[str] = []
    for name, found in channels.items():
        lines.append(name)
        pending, paired = found["pending"], found["paired"]
        if not pending and not paired:
            lines.append("  nothing pending, nobody paired")
            continue
        lines.append(f"  pending ({len(pending)}):" if pending else "  nothing pending")
        for request in pending:
            expires = datetime.fromisoformat(request["expires"])
            lines.append(f"    {request['code']}  {_who(request)}  expires {expires:%H:%M} UTC")
        lines.append(f"  paired ({len(paired)}):" if paired else "  nobody paired")
        for user in paired:
            approved = datetime.fromisoformat(user["approved"])
            lines.append(f"    {_who(user)}  approved {approved:%Y-%m-%d}")
    return lines


def _who(record: dict[str, Any]) -> str:
    name = _clip(str(record.get("user_name") or ""), 18)
    user = f"user {_clip(str(record['user_id']), 20)}"
    return f"{user} ({name})" if name else user


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# --- plumbing --------------------------------------------------------------------------


def _call(
    settings: GatewayConfig, op: str, fields: dict[str, Any], offline: Offline
) -> dict[str, Any]:
    """``op`` through the running gateway, else ``offline`` on the state store itself."""

    async def go() -> dict[str, Any]:
        answer = await ask(settings, op, **fields)
        if answer is not None:
            return answer
        state = await open_state_store(settings.state_store_url())
        try:
            service = PairingService(state, settings.channels.access_sections())
            await service.load()
            return await offline(service)
        finally:
            await state.close()

    try:
        return asyncio.run(go())
    except (ControlError, PairingError, StateStoreError) as exc:
        fail(str(exc))
