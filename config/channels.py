"""The sections of what people reach the gateway through: chat channels, HTTP, admin.

``[channels.*]`` (Telegram, Discord, the web chat, the terminal, the
OpenAI-compatible API), ``[http]`` (the one server carrying the web parts) and
``[admin]`` (the admin API and dashboard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator

from config.access import AccessConfig
from config.section import NAME, Section, given, is_loopback, normal_origin


class TelegramAccount(Section):
    """One Telegram bot: its token, how it receives updates, and who may talk to it.

    The token comes from ``token_env`` (default ``TELEGRAM_BOT_TOKEN``), or
    ``token_file``, or ``token`` inline; it is never logged. ``polling`` asks
    Telegram for updates; ``webhook`` has Telegram POST them to ``webhook_url``,
    which must reach the gateway's web server at ``/telegram/<account>``, each
    one carrying ``webhook_secret``.
    """

    token: SecretStr | None = None
    token_env: str = "TELEGRAM_BOT_TOKEN"
    token_file: Path | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = ""
    webhook_secret: SecretStr | None = None
    webhook_secret_file: Path | None = None
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    # Telegram's own flood limits (30 messages/s, 20/min per group), kept by PTB.
    rate_limit: bool = True
    # While a turn runs: the typing indicator, and the answer streamed into one
    # message edited in place (at most one edit per edit_seconds). ``stream_edits``
    # is its former name, still read.
    typing: bool = True
    stream: bool = Field(default=True, validation_alias=AliasChoices("stream", "stream_edits"))
    edit_seconds: float = Field(default=1.0, ge=0.0, le=60.0)
    access: AccessConfig = Field(default_factory=AccessConfig)

    @model_validator(mode="after")
    def _webhook(self) -> TelegramAccount:
        if self.mode == "webhook":
            url = urlsplit(self.webhook_url)
            local = url.scheme == "http" and is_loopback(url.hostname or "")
            if url.scheme != "https" and not local:
                raise ValueError(
                    "mode = 'webhook' needs webhook_url, the https:// address Telegram posts "
                    "updates to (it must reach this gateway's web server)"
                )
            if self.webhook_secret is None and self.webhook_secret_file is None:
                raise ValueError(
                    "mode = 'webhook' needs webhook_secret (or webhook_secret_file): Telegram "
                    "sends it with every update, so nobody else can post updates"
                )
        return self


class TelegramConfig(TelegramAccount):
    """The Telegram channel: the default bot, and more bots under ``accounts.<name>``.

    The default bot's chats are ``telegram:<user id>``, ``telegram:group:<chat id>``
    and ``telegram:group:<chat id>:topic:<thread id>``; another account's carry its
    name: ``telegram.<name>:<user id>``.
    """

    enabled: bool = False
    accounts: dict[str, TelegramAccount] = Field(default_factory=dict)

    @field_validator("accounts")
    @classmethod
    def _account_names(cls, value: dict[str, TelegramAccount]) -> dict[str, TelegramAccount]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"account name {name!r} must match [a-z0-9][a-z0-9_-]*")
        return value


class DiscordConfig(Section):
    """A Discord bot: its token, where discord.py reaches Discord, and who may talk to it.

    The token comes from ``token_env`` (default ``DISCORD_BOT_TOKEN``), or
    ``token_file``, or ``token`` inline; it is never logged. ``api_base`` and
    ``gateway_url`` point discord.py elsewhere (a proxy, a test server);
    ``ready_timeout_seconds`` is how long discord.py waits for the servers'
    data after connecting before the bot counts as ready. Chats are
    ``discord:<user id>`` (a direct message), ``discord:channel:<id>`` and
    ``discord:channel:<id>:thread:<thread id>``.
    """

    enabled: bool = False
    token: SecretStr | None = None
    token_env: str = "DISCORD_BOT_TOKEN"
    token_file: Path | None = None
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str = ""
    ready_timeout_seconds: float = Field(default=2.0, ge=0.0, le=60.0)
    # While a turn runs: the typing indicator, and the answer streamed into one
    # message edited in place (at most one edit per edit_seconds). ``stream_edits``
    # is its former name, still read.
    typing: bool = True
    stream: bool = Field(default=True, validation_alias=AliasChoices("stream", "stream_edits"))
    edit_seconds: float = Field(default=1.0, ge=0.0, le=60.0)
    access: AccessConfig = Field(default_factory=AccessConfig)


class WebConfig(Section):
    """The browser chat at ``/`` of the HTTP server: which other origins may embed it, its token.

    ``max_file_bytes`` is what the files of one message may weigh together (0
    turns attachments off); ``history`` is how many items of the conversation
    a page is shown when it opens.
    """

    enabled: bool = True
    token: SecretStr | None = None
    token_file: Path | None = None
    allowed_origins: list[str] = Field(default_factory=list)
    max_file_bytes: int = Field(default=8 * 1024 * 1024, ge=0, le=64 * 1024 * 1024)
    history: int = Field(default=50, ge=0, le=500)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        return [normal_origin(origin) for origin in value]


class CliConfig(Section):
    enabled: bool = True
    user_id: str = "local"


class ApiConfig(Section):
    """The OpenAI-compatible HTTP API (``/v1/chat/completions``, ``/v1/models``) at ``/v1``.

    Its bearer keys: ``api_key``, and every line of ``api_key_file`` (one key a
    line; blank lines and ``#`` comments skipped), all equal. With none, only a
    loopback ``[http] host`` is allowed and the API asks for no key.
    """

    enabled: bool = False
    api_key: SecretStr | None = None
    api_key_file: Path | None = None


class ChannelsConfig(Section):
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    cli: CliConfig = Field(default_factory=CliConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)

    def access_sections(self) -> dict[str, AccessConfig]:
        """The chat channels with access control, by channel name.

        ``telegram`` and ``discord`` (``[channels.<name>.access]``), and each
        Telegram account as ``telegram.<account>``
        (``[channels.telegram.accounts.<account>.access]``), whether enabled or not.
        """
        found: dict[str, AccessConfig] = {}
        for name in type(self).model_fields:
            section = getattr(self, name)
            access = getattr(section, "access", None)
            if isinstance(access, AccessConfig):
                found[name] = access
            for account, settings in getattr(section, "accounts", {}).items():
                inner = getattr(settings, "access", None)
                if isinstance(inner, AccessConfig):
                    found[f"{name}.{account}"] = inner
        return found


ADMIN_TOKEN_MIN = 16


def check_admin_token(token: str, where: str) -> str:
    """Refuse an admin token too short to guess hard; the message never shows the token."""
    if len(token) < ADMIN_TOKEN_MIN:
        raise ValueError(
            f"{where} is {len(token)} characters; use at least {ADMIN_TOKEN_MIN}, e.g. "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return token


class AdminConfig(Section):
    """The admin HTTP API (``/api``) and dashboard (``/admin``); the CLI uses the control socket.

    Off by default. When on, every request to ``/api`` needs ``token`` (or the
    contents of ``token_file``) as ``Authorization: Bearer …``, on loopback too.
    """

    enabled: bool = False
    token: SecretStr | None = None
    token_file: Path | None = None
    # Browser origins besides the gateway's own whose pages may call the API
    # (the dashboard behind a proxy that rewrites Host).
    allowed_origins: list[str] = Field(default_factory=list)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        return [normal_origin(origin) for origin in value]

    @field_validator("token")
    @classmethod
    def _long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and token.get_secret_value():
            check_admin_token(token.get_secret_value(), "admin.token")
        return token

    @model_validator(mode="after")
    def _token_when_enabled(self) -> AdminConfig:
        if self.enabled and not given(self.token, self.token_file):
            raise ValueError(
                "admin.enabled needs admin.token (or token_file): the admin API asks for it "
                "on every request, on loopback too"
            )
        return self


class HttpConfig(Section):
    """The gateway's one HTTP server.

    It carries the web chat at ``/``, the OpenAI-compatible API at ``/v1``,
    the admin API at ``/api`` and its dashboard at ``/admin``, and platform
    webhooks under ``/telegram``; each part is switched on in its own section.
    Off loopback, every part that is on needs its token.
    """

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    # The largest request body taken (attachments come in one message).
    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=1024**3)
