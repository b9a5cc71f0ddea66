"""Model clients: OpenAI chat completions and Anthropic messages over aiohttp.

:func:`make_client` builds the client a ``[models.providers.<name>]`` section
describes; the agent loop sees only :class:`ModelClient`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from config.models import ProviderConfig
from config.section import read_secret
from threads.llm.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from threads.llm.anthropic import AnthropicClient
from threads.llm.base import (
    UNPARSED_ARGS_KEY,
    DeltaCallback,
    ModelClient,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolSpec,
)
from threads.llm.errors import (
    ContextOverflowError,
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
    RateLimitError,
)
from threads.llm.openai import OpenAIClient
from threads.llm.retry import Clock, RetryPolicy, Sleep

__all__ = [
    "UNPARSED_ARGS_KEY",
    "AnthropicClient",
    "ContextOverflowError",
    "DeltaCallback",
    "ModelClient",
    "ModelConfigError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRequest",
    "ModelResponse",
    "ModelResponseError",
    "ModelTimeoutError",
    "OpenAIClient",
    "RateLimitError",
    "RetryPolicy",
    "StopReason",
    "ToolSpec",
    "make_client",
    "resolve_api_key",
]

# The vendors' own variables are read only for the vendors' own hosts, so a key
# meant for OpenAI never travels to a third-party base_url by accident.
_VENDOR_KEYS = {"api.openai.com": "OPENAI_API_KEY", "api.anthropic.com": "ANTHROPIC_API_KEY"}


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _base_url(config: ProviderConfig) -> str:
    if config.kind == "anthropic" and "base_url" not in config.model_fields_set:
        return ANTHROPIC_BASE_URL
    return config.base_url


def resolve_api_key(provider_name: str, config: ProviderConfig) -> str:
    """The provider's API key: ``api_key``, else ``api_key_file``, else ``api_key_env``.

    With none of them configured, ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` is
    read when the base URL is that vendor's; otherwise there is no key ("").
    Errors name the setting, never the secret.
    """
    where = f"models.providers.{provider_name}"
    key_file = f"{where}.api_key_file"
    try:
        secret = read_secret(config.api_key, config.api_key_file, key_file)
    except ValueError as exc:
        raise ModelConfigError(key_file, str(exc).removeprefix(f"{key_file}: ")) from None
    if secret is not None and secret.get_secret_value():
        return secret.get_secret_value()
    if config.api_key_file is not None:
        raise ModelConfigError(key_file, f"{config.api_key_file} is empty")
    if config.api_key_env:
        value = os.environ.get(config.api_key_env, "")
        if not value:
            raise ModelConfigError(
                f"{where}.api_key_env",
                f"names {config.api_key_env}, which is not set in the environment; "
                "export it or set api_key_file",
            )
        return value
    vendor_env = _VENDOR_KEYS.get(_host(_base_url(config)))
    return os.environ.get(vendor_env, "") if vendor_env else ""


def make_client(
    provider_name: str,
    config: ProviderConfig,
    *,
    sleep: Sleep | None = None,
    clock: Clock | None = None,
) -> ModelClient:
    """The client for one configured provider.

    ``sleep`` and ``clock`` replace ``asyncio.sleep`` and ``time.monotonic``
    in the retry loop (tests pass fakes to retry without waiting).
    """
    api_key = resolve_api_key(provider_name, config)
    base_url = _base_url(config)
    retry = RetryPolicy.from_config(config)
    if config.kind == "anthropic":
        return AnthropicClient(
            base_url=base_url,
            api_key=api_key,
            name=provider_name,
            headers=config.headers,
            timeout_seconds=config.timeout_seconds,
            retry=retry,
            sleep=sleep,
            clock=clock,
            run_metadata=config.run_metadata,
        )
    return OpenAIClient(
        base_url=base_url,
        api_key=api_key,
        name=provider_name,
        headers=config.headers,
        timeout_seconds=config.timeout_seconds,
        retry=retry,
        sleep=sleep,
        clock=clock,
        max_tokens_field=(
            "max_completion_tokens" if _host(base_url) == "api.openai.com" else "max_tokens"
        ),
        run_metadata=config.run_metadata,
    )
