"""Webhook delivery: what Telegram does with updates while a bot has a webhook set.

Telegram POSTs each update as JSON to the webhook URL, with the secret token
the bot chose in the ``X-Telegram-Bot-Api-Secret-Token`` header, one at a
time and in order; a 2xx answer confirms the update, anything else leaves it
pending and is reported by ``getWebhookInfo`` as ``last_error_message``. The
fake tries a failed update again at the next change after the failure (a new
update, a new webhook, a call of the bot), never on a timer.
"""

from __future__ import annotations

import aiohttp

from channels.testing.telegram_world import JSON, World

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


async def post_update(
    session: aiohttp.ClientSession, url: str, update: JSON, *, secret_token: str | None = None
) -> int:
    """POST ``update`` to ``url`` as Telegram posts to a webhook; the HTTP status of the answer."""
    headers = {SECRET_HEADER: secret_token} if secret_token else {}
    async with session.post(url, json=update, headers=headers) as response:
        await response.read()
        return response.status


class WebhookPusher:
    """Delivers a world's pending updates to its webhook while one is set."""

    def __init__(self, world: World, session: aiohttp.ClientSession) -> None:
        self.world = world
        self.session = session
        self.delivered: list[JSON] = []

    async def run(self) -> None:
        world = self.world
        while True:
            changed = world.changed()
            hook = world.webhook
            updates = world.deliverable(hook.allowed_updates, 1) if hook else []
            if hook is None or not updates:
                await changed.wait()
                continue
            update = updates[0]
            try:
                status = await post_update(
                    self.session, hook.url, update, secret_token=hook.secret_token
                )
            except (aiohttp.ClientError, TimeoutError) as exc:
                world.webhook_failed(f"Connection failed: {exc.__class__.__name__}: {exc}")
                await world.changed().wait()
                continue
            if 200 <= status < 300:
                world.confirm(update["update_id"] + 1)
                self.delivered.append(update)
                world.notify()
            else:
                world.webhook_failed(f"Wrong response from the webhook: {status}")
                await world.changed().wait()
