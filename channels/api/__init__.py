"""The OpenAI-compatible HTTP API channel (``/v1``): see :mod:`channels.api.channel`."""

from channels.api.channel import ApiChannel, read_keys

__all__ = ["ApiChannel", "read_keys"]
