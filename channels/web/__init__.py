"""The web chat: a page people enjoy, over one WebSocket per tab.

- :mod:`.channel` — the channel: the socket's frames, acknowledgements,
  replies, history on connect;
- :mod:`.tabs` — each chat's open tabs, and replies waiting for one;
- :mod:`.live` — a running turn as the tabs see it: typing, tools, drafts;
- :mod:`.guard` — who may open it (signed chat cookie, Origin, Host, token)
  and the headers every response carries;
- :mod:`.frames` — what the page sends, checked;
- :mod:`.history` — the conversation as the page shows it, from the session;
- :mod:`.files` — the files people attach, kept per chat;
- :mod:`.refusals` — the one line a person reads for a message not taken;
- ``static/`` — the page, its script modules and its stylesheet.
"""

from channels.web.channel import WebChannel
from channels.web.frames import MAX_TEXT
from channels.web.guard import load_key
from channels.web.refusals import refusal_of

__all__ = ["MAX_TEXT", "WebChannel", "load_key", "refusal_of"]
