"""Building the platform channels the configuration enables, and finding their secrets.

Each Telegram account (the default one and every ``[channels.telegram.accounts.<name>]``)
becomes one :class:`~channels.telegram.TelegramChannel` named ``telegram`` or
``telegram.<name>``. Its token comes from ``token``, else ``token_file``, else
the environment variable ``token_env``; a missing one is a :class:`~config.Problem`
naming the setting — never the secret — which ``gateway config check`` reports
and start-up refuses (:mod:`gateway.preflight`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr

from config import GatewayConfig, Problem
from config.channels import TelegramAccount
from config.section import read_secret

if TYPE_CHECKING:
    from channels.discord import DiscordChannel
    from channels.telegram import TelegramChannel


class SecretMissing(ValueError):
    """A channel secret that cannot be found; the problem names the setting."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramAccountSetup:
    """One enabled Telegram account: its channel name, its settings and where they live."""

    channel: str
    settings: TelegramAccount
    path: str

    @property
    def account(self) -> str:
        return self.channel.partition(".")[2] or "default"


def telegram_accounts(config: GatewayConfig) -> list[TelegramAccountSetup]:
    """The Telegram accounts to run: none unless ``[channels.telegram] enabled``."""
    telegram = config.channels.telegram
    if not telegram.enabled:
        return []
    accounts = [
        TelegramAccountSetup(channel="telegram", settings=telegram, path="channels.telegram")
    ]
    for name, settings in telegram.accounts.items():
        accounts.append(
            TelegramAccountSetup(
                channel=f"telegram.{name}",
                settings=settings,
                path=f"channels.telegram.accounts.{name}",
            )
        )
    return accounts


def secret(
    path: str,
    inline: SecretStr | None,
    file: Path | None,
    env: str,
    *,
    what: str,
    file_setting: str,
    env_setting: str,
) -> str:
    """A channel secret from its inline value, its file, or its environment variable.

    Raises :class:`SecretMissing` naming the setting when none gives one.
    """
    try:
        given = read_secret(inline, file, f"{path}.{file_setting}")
    except ValueError as exc:
        raise SecretMissing(
            Problem(path=f"{path}.{file_setting}", message=str(exc).split(": ", 1)[-1])
        ) from None
    if given is not None and given.get_secret_value():
        return given.get_secret_value()
    if file is not None:
        raise SecretMissing(Problem(path=f"{path}.{file_setting}", message=f"{file} is empty"))
    value = os.environ.get(env, "") if env else ""
    if value:
        return value
    if env:
        raise SecretMissing(
            Problem(
                path=f"{path}.{env_setting}",
                message=f"names {env}, which is not set in the environment: put {what} there "
                f"(or set {file_setting})",
            )
        )
    raise SecretMissing(
        Problem(path=path, message=f"no {what}: set {env_setting} or {file_setting}")
    )


def telegram_token(setup: TelegramAccountSetup) -> str:
    settings = setup.settings
    return secret(
        setup.path,
        settings.token,
        settings.token_file,
        settings.token_env,
        what="the bot token from @BotFather",
        file_setting="token_file",
        env_setting="token_env",
    )


def telegram_webhook_secret(setup: TelegramAccountSetup) -> str:
    settings = setup.settings
    if settings.mode != "webhook":
        return ""
    return secret(
        setup.path,
        settings.webhook_secret,
        settings.webhook_secret_file,
        "",
        what="the webhook secret",
        file_setting="webhook_secret_file",
        env_setting="webhook_secret",
    )


def discord_token(config: GatewayConfig) -> str:
    discord = config.channels.discord
    return secret(
        "channels.discord",
        discord.token,
        discord.token_file,
        discord.token_env,
        what="the bot token from the Discord developer portal",
        file_setting="token_file",
        env_setting="token_env",
    )


def channel_problems(config: GatewayConfig) -> list[Problem]:
    """The enabled channels' secrets that cannot be found, and settings that cannot work."""
    problems: list[Problem] = []
    if config.channels.discord.enabled:
        try:
            discord_token(config)
        except SecretMissing as exc:
            problems.append(exc.problem)
    for setup in telegram_accounts(config):
        for find in (telegram_token, telegram_webhook_secret):
            try:
                find(setup)
            except SecretMissing as exc:
                problems.append(exc.problem)
        if setup.settings.mode == "webhook" and not config.http.enabled:
            problems.append(
                Problem(
                    path=f"{setup.path}.mode",
                    message="webhook mode is served by the HTTP server: enable [http]",
                )
            )
    return problems


def build_telegram(
    config: GatewayConfig, commands: Sequence[tuple[str, str]]
) -> list[TelegramChannel]:
    """One channel per enabled Telegram account (raises :class:`SecretMissing`)."""
    accounts = telegram_accounts(config)
    if not accounts:
        return []
    from channels.telegram import TelegramChannel, TelegramOptions

    channels = []
    for setup in accounts:
        settings = setup.settings
        channels.append(
            TelegramChannel(
                TelegramOptions(
                    name=setup.channel,
                    token=telegram_token(setup),
                    mode=settings.mode,
                    webhook_url=settings.webhook_url,
                    webhook_secret=telegram_webhook_secret(setup),
                    base_url=settings.base_url,
                    base_file_url=settings.base_file_url,
                    rate_limit=settings.rate_limit,
                    typing=settings.typing,
                    drafts=settings.stream,
                    edit_every=settings.edit_seconds,
                    commands=commands,
                )
            )
        )
    return channels


def build_discord(
    config: GatewayConfig, commands: Sequence[tuple[str, str]]
) -> list[DiscordChannel]:
    """The Discord channel when it is enabled (raises :class:`SecretMissing`)."""
    settings = config.channels.discord
    if not settings.enabled:
        return []
    from channels.discord import DiscordChannel, DiscordOptions

    return [
        DiscordChannel(
            DiscordOptions(
                token=discord_token(config),
                api_base=settings.api_base,
                gateway_url=settings.gateway_url,
                ready_timeout=settings.ready_timeout_seconds,
                typing=settings.typing,
                drafts=settings.stream,
                edit_every=settings.edit_seconds,
                commands=commands,
            )
        )
    ]


def webhook_account(channel: str) -> str:
    """A Telegram account's name in its webhook path, ``/telegram/<account>``."""
    return channel.partition(".")[2] or "default"
