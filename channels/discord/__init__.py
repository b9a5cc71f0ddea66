"""The Discord channel: discord.py's Client inside the gateway.

``address`` is where a conversation is (a direct message, a guild channel, a
thread) and how it is written in a session key; ``inbound`` turns a Discord
message into an :class:`~channels.base.Inbound`; ``adapter`` is the channel.
"""

from channels.discord.adapter import DiscordChannel, DiscordOptions

__all__ = ["DiscordChannel", "DiscordOptions"]
