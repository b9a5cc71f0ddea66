"""Resolving ``provider/model`` references to model clients (one client per provider)."""

from __future__ import annotations

from collections.abc import Mapping

from config.models import ModelsConfig, ModelSettings
from threads.llm.base import ModelClient
from threads.llm.echo import EchoModel

ECHO = "echo"


class UnknownModelError(LookupError):
    """A model reference whose provider is not configured."""

    def __init__(self, ref: str, known: list[str]) -> None:
        self.ref = ref
        super().__init__(
            f"model {ref!r} names no configured provider; configured: {known or ['echo']}"
        )


class Models:
    """The configured providers' clients, created on first use and closed together."""

    def __init__(
        self, config: ModelsConfig, *, clients: Mapping[str, ModelClient] | None = None
    ) -> None:
        self._config = config
        self._clients: dict[str, ModelClient] = dict(clients or {})
        self._settings_default = ModelSettings()

    def providers(self) -> list[str]:
        return sorted({*self._config.providers, *self._clients})

    def resolve(self, ref: str) -> tuple[ModelClient, str, ModelSettings]:
        """The client, the model name to send, and the model's limits."""
        if ref == ECHO:
            client = self._clients.get(ECHO)
            if client is None:
                client = self._clients[ECHO] = EchoModel()
            return client, ECHO, self._config.settings.get(ECHO, self._settings_default)
        provider, _, model = ref.partition("/")
        client = self._clients.get(provider)
        if client is None:
            provider_config = self._config.providers.get(provider)
            if provider_config is None:
                raise UnknownModelError(ref, self.providers())
            from threads.llm import make_client

            client = self._clients[provider] = make_client(provider, provider_config)
        return client, model, self._config.settings.get(ref, self._settings_default)

    def valid(self, ref: str) -> bool:
        if ref == ECHO:
            return True
        provider, sep, model = ref.partition("/")
        return bool(sep and model) and (
            provider in self._config.providers or provider in self._clients
        )

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
