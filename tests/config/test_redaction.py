"""Redaction: the credentials of a URL never reach a printed or logged line."""

from __future__ import annotations

import pytest

from config.redaction import redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://app:hunter2@[::1]:6380/2", "rediss://app:***@[::1]:6380/2"),
        ("https://ghp_tok3n@github.com/x.git", "https://***@github.com/x.git"),
        ("redis://u:p@ss@host/0", "redis://u:***@host/0"),
        ("redis://host/0?password=hunter2&db=1", "redis://host/0?password=***&db=1"),
        ("https://h/v1?api_key=hunter2", "https://h/v1?api_key=***"),
        ("jsonl://./data/sessions", "jsonl://./data/sessions"),
        ("https://example.com/path?q=1", "https://example.com/path?q=1"),
    ],
)
def test_a_url_keeps_its_host_and_loses_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_urls_inside_a_message_are_scrubbed_and_the_rest_is_kept() -> None:
    text = (
        "Error connecting to redis://default:hunter2@10.0.0.5:6379/3 (tried "
        "'rediss://:hunter3@backup:6380'); mail me at ops@example.com"
    )
    assert redact_text(text) == (
        "Error connecting to redis://default:***@10.0.0.5:6379/3 (tried "
        "'rediss://:***@backup:6380'); mail me at ops@example.com"
    )
