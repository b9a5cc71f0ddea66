"""The gateway's one HTTP server and the parts it carries (web chat, API, admin, webhooks)."""
