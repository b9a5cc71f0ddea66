"""The starter ``gateway.toml`` that ``gateway init`` writes: short, commented, valid.

It holds only what a new operator chooses — the model provider and the chat
platforms, each by the *name* of the environment variable that holds its
secret, never the secret — and points at ``gateway.example.toml`` for the
rest. :func:`render` is pure, so the file is tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True, slots=True, kw_only=True)
class Provider:
    """A model provider a starter file can name: how it is reached and a model to begin with."""

    name: str
    kind: str
    base_url: str
    key_env: str
    model: str
    about: str


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(
            name="openai",
            kind="openai",
            base_url="https://api.openai.com/v1",
            key_env="OPENAI_API_KEY",
            model="gpt-4o-mini",
            about="OpenAI",
        ),
        Provider(
            name="anthropic",
            kind="anthropic",
            base_url="https://api.anthropic.com/v1",
            key_env="ANTHROPIC_API_KEY",
            model="claude-3-5-haiku-latest",
            about="Anthropic",
        ),
        Provider(
            name="openrouter",
            kind="openai",
            base_url="https://openrouter.ai/api/v1",
            key_env="OPENROUTER_API_KEY",
            model="openai/gpt-4o-mini",
            about="OpenRouter (many vendors' models behind one key)",
        ),
        Provider(
            name="ollama",
            kind="openai",
            base_url="http://127.0.0.1:11434/v1",
            key_env="",
            model="llama3.2",
            about="Ollama on this machine (no key)",
        ),
        Provider(
            name="echo",
            kind="",
            base_url="",
            key_env="",
            model="",
            about="no model: the offline echo model answers by echoing (to try things out)",
        ),
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Choices:
    """What the operator chose; empty strings are "not wanted"."""

    provider: str = "echo"
    model: str = ""
    api_key_env: str = ""
    telegram_token_env: str = ""
    discord_token_env: str = ""
    timezone: str = "UTC"
    data_dir: str = "./data"

    def checked(self) -> Choices:
        """These choices, or ValueError naming the option that is wrong."""
        if self.provider not in PROVIDERS:
            raise ValueError(f"--provider {self.provider!r} is not one of {', '.join(PROVIDERS)}")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"--timezone {self.timezone!r} is not an IANA time zone (e.g. Europe/Berlin, UTC)"
            ) from None
        for option, name in (
            ("--api-key-env", self.api_key_env),
            ("--telegram-token-env", self.telegram_token_env),
            ("--discord-token-env", self.discord_token_env),
        ):
            if name and not name.replace("_", "").isalnum():
                raise ValueError(
                    f"{option} {name!r} is the name of an environment variable "
                    "(letters, digits, '_'), not its value"
                )
        return self


def render(choices: Choices) -> str:
    """The starter file for ``choices``."""
    provider = PROVIDERS[choices.provider]
    lines = [
        "# gateway.toml — written by `gateway init`. Every option is described in",
        "# gateway.example.toml; `gateway config check` says whether this file will start.",
        "# Secrets are never written here: each setting below names the environment",
        "# variable that holds one. Export them before `make run`.",
        "",
        "# IANA time zone for wake headers and cron expressions.",
        f'timezone = "{choices.timezone}"',
        "# Sessions, cron jobs and the control socket live here (made private: 0700).",
        "# Relative paths in [store] are under this directory.",
        f'data_dir = "{choices.data_dir}"',
        "",
    ]
    lines += _models(provider, choices)
    lines += _telegram(choices.telegram_token_env)
    lines += _discord(choices.discord_token_env)
    return "\n".join(lines).rstrip() + "\n"


def _models(provider: Provider, choices: Choices) -> list[str]:
    if provider.name == "echo":
        return [
            "[models]",
            "# No model yet: the offline echo model answers. To use one, run",
            "# `gateway init --force` again, or add a provider as gateway.example.toml shows.",
            'default = "echo"',
            "",
        ]
    model = choices.model or provider.model
    key_env = choices.api_key_env or provider.key_env
    lines = [
        "[models]",
        "# The model agents use: provider/model.",
        f'default = "{provider.name}/{model}"',
        "",
        f"# {provider.about}.",
        f"[models.providers.{provider.name}]",
        f'kind = "{provider.kind}"',
        f'base_url = "{provider.base_url}"',
    ]
    if key_env:
        lines += [
            "# The API key is read from this environment variable (or use api_key_file).",
            f'api_key_env = "{key_env}"',
        ]
    return [*lines, ""]


def _telegram(token_env: str) -> list[str]:
    if not token_env:
        return [
            "# Telegram: `gateway init --telegram-token-env TELEGRAM_BOT_TOKEN`, or see the",
            '# README, "Telegram in 3 minutes".',
            "",
        ]
    return [
        "# A Telegram bot: create it with @BotFather, then export its token.",
        "[channels.telegram]",
        "enabled = true",
        f'token_env = "{token_env}"',
        "",
        "[channels.telegram.access]",
        "# A stranger's first message gets a pairing code; let them in with",
        "# `gateway pairing approve telegram CODE`. Or list your user id in allow_from.",
        'dm_policy = "pairing"',
        "allow_from = []",
        "# Group chat ids the bot may answer in (it answers when mentioned).",
        "groups = []",
        "",
    ]


def _discord(token_env: str) -> list[str]:
    if not token_env:
        return [
            "# Discord: `gateway init --discord-token-env DISCORD_BOT_TOKEN`, or see the",
            '# README, "Discord in 3 minutes".',
            "",
        ]
    return [
        "# A Discord bot: its token from the developer portal (turn on Message Content Intent).",
        "[channels.discord]",
        "enabled = true",
        f'token_env = "{token_env}"',
        "",
        "[channels.discord.access]",
        "# Direct messages pair like Telegram's; channel ids the bot may answer in:",
        'dm_policy = "pairing"',
        "groups = []",
        "",
    ]
