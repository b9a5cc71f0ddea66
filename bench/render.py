"""Outbound rendering benchmark: a 10 000-character answer rendered and chunked.

    .venv/bin/python bench/render.py [--runs 200]

The answer mixes what models write: headings, prose with bold, code spans,
links and emoji, nested lists, fenced Python blocks, quotes and a table. Each
figure is the median wall time of ``--runs`` calls, in milliseconds, after a
few warm-up calls:

- ``render_10k_telegram_ms``: ``telegram_chunks`` (parse, walk, cut, HTML and
  plain text of every chunk), what the Telegram adapter calls per answer;
- ``render_10k_discord_ms``: ``render_discord``;
- ``render_10k_plain_ms``: ``render_plain`` at Telegram's limit;
- ``parse_10k_ms``: the markdown-it-py parse alone, the floor of the others.

Rendering runs on the event loop, so these are loop-blocking times. The last
line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels.render import (
    TELEGRAM_LIMIT,
    parse,
    render_discord,
    render_plain,
    telegram_chunks,
)


def sample_answer(size: int = 10_000) -> str:
    """A model-like markdown answer of at least ``size`` characters."""
    blocks: list[str] = []
    number = 0
    while sum(map(len, blocks)) < size:
        number += 1
        blocks += [
            f"## Step {number}: the *plan*",
            f"Here is **what we do** next, with `inline code`, a [link](https://example.com/{number})"
            " and an emoji 😀. " + "The words run on for a while. " * 10,
            "- first item with **bold**\n- second item\n  - nested one\n  - nested two\n1. one\n2. two",
            f"```python\ndef step_{number}(x):\n"
            + "".join(f"    y_{k} = x + {k}  # <{k}> & more\n" for k in range(15))
            + "    return x\n```",
            "> A quote that says something\n> over two lines.",
            "| key | value |\n|-----|------:|\n| a | 1 |\n| b | 22 |",
        ]
    return "\n\n".join(blocks)


def median_ms(call: Callable[[], object], runs: int) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    answer = sample_answer()
    telegram = telegram_chunks(answer)
    discord = render_discord(answer)
    print(
        f"answer: {len(answer)} characters, {len(telegram)} Telegram / {len(discord)} Discord chunks"
    )
    figures = {
        "render_10k_telegram_ms": median_ms(lambda: telegram_chunks(answer), args.runs),
        "render_10k_discord_ms": median_ms(lambda: render_discord(answer), args.runs),
        "render_10k_plain_ms": median_ms(lambda: render_plain(answer, TELEGRAM_LIMIT), args.runs),
        "parse_10k_ms": median_ms(lambda: parse(answer), args.runs),
        "answer_chars": len(answer),
        "telegram_chunks": len(telegram),
        "discord_chunks": len(discord),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
