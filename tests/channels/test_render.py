"""Outbound rendering: markdown as Telegram HTML, plain text and Discord markdown, in chunks."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.render import (
    ALLOWED_TAGS,
    DISCORD_LIMIT,
    TELEGRAM_LIMIT,
    TELEGRAM_MAX_ENTITIES,
    chat_document,
    render_discord,
    render_plain,
    render_telegram,
    telegram_chunks,
    to_html,
    utf16_len,
)
from channels.render.markdown import is_safe_link


class _Checker(HTMLParser):
    """Reads Telegram HTML as Telegram would: allowed tags only, balanced, text unescaped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.problems: list[str] = []
        self.entities = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"tag <{tag}> is not allowed")
        if tag == "a" and (len(attrs) != 1 or attrs[0][0] != "href"):
            self.problems.append(f"<a> with attributes {attrs}")
        if tag == "a" and not is_safe_link(attrs[0][1] or ""):
            self.problems.append(f"<a> to an unsafe target {attrs}")
        if tag == "code" and attrs and (self.stack[-1:] != ["pre"] or attrs[0][0] != "class"):
            self.problems.append(f"<code> with attributes {attrs} outside <pre>")
        if tag not in ("a", "code") and attrs:
            self.problems.append(f"<{tag}> with attributes {attrs}")
        if not (tag == "code" and self.stack[-1:] == ["pre"]):
            self.entities += 1
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.problems.append(f"self-closing <{tag}/>")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check(html: str) -> _Checker:
    """``html`` read after checking it is well-formed and uses only Telegram's tags and entities."""
    assert not re.search(r"&(?!(amp|lt|gt|quot);)", html), html
    checker = _Checker()
    checker.feed(html)
    checker.close()
    assert not checker.problems, (checker.problems, html)
    assert not checker.stack, (checker.stack, html)
    return checker


def visible(html: str) -> str:
    """The text Telegram shows for well-formed ``html``."""
    return "".join(check(html).text)


def assert_same_text(parts: list[str], whole: str) -> None:
    """The parts, in order, are the whole text, with only whitespace dropped at each cut."""
    pattern = r"\s*".join(re.escape(part) for part in ["", *parts, ""])
    assert re.fullmatch(pattern, whole), (parts, whole)


def sample_answer() -> str:
    """An answer of over 10 000 characters: prose, lists, code, a table, links, emoji."""
    blocks = []
    number = 0
    while sum(map(len, blocks)) < 10_000:
        number += 1
        blocks += [
            f"## Part {number}: the *plan* & <details>",
            "Here is **what we do** next, with `inline code`, a [link](https://example.com/docs?a=1&b=2)"
            f" and an emoji 😀 in paragraph {number}. " + "Words run on and on. " * 12,
            "- first item with **bold**\n- second item\n  - nested one\n  - nested two\n"
            "- third item\n\n1. one\n2. two",
            f"```python\ndef step_{number}(x):\n    if x > 1:\n        return x * 2  # <ok> & fine\n"
            + "".join(f"    y_{k} = x + {k}\n" for k in range(20))
            + "    return x\n```",
            "> A quote that says something\n> over two lines.",
            "| key | value |\n|-----|------:|\n| a | 1 |\n| b | 22 |",
        ]
    return "\n\n".join(blocks)


# -- Telegram: each construct


def test_bold_italic_and_strikethrough_become_b_i_and_s() -> None:
    assert render_telegram("**bold** *italic* _also_ ~~gone~~") == [
        "<b>bold</b> <i>italic</i> <i>also</i> <s>gone</s>"
    ]


def test_a_code_span_is_code_and_the_bold_around_it_pauses() -> None:
    # Telegram lets no style hold code, so bold closes before it and reopens after.
    assert render_telegram("**a `x < y` b**") == ["<b>a </b><code>x &lt; y</code><b> b</b>"]


def test_a_fenced_code_block_keeps_its_language_and_its_indentation() -> None:
    html = render_telegram("```python\ndef f():\n    return '<a>' & 1\n```")
    assert html == [
        "<pre><code class=\"language-python\">def f():\n    return '&lt;a&gt;' &amp; 1</code></pre>"
    ]


def test_a_code_block_without_a_language_is_a_bare_pre() -> None:
    assert render_telegram("```\nplain\n```") == ["<pre>plain</pre>"]
    assert render_telegram("    indented code") == ["<pre>indented code</pre>"]


def test_a_link_with_a_safe_scheme_is_an_anchor_with_its_href_escaped() -> None:
    html = render_telegram('[docs](https://example.com/?a=1&b="2") and <tg://resolve?domain=x>')
    assert html == [
        '<a href="https://example.com/?a=1&amp;b=%222%22">docs</a> and '
        '<a href="tg://resolve?domain=x">tg://resolve?domain=x</a>'
    ]


def test_a_javascript_link_is_text_never_an_anchor() -> None:
    for answer in (
        "[click](javascript:alert(1))",
        "<javascript:alert(1)>",
        "[x](JAVASCRIPT:alert(1))",
    ):
        html = render_telegram(answer)[0]
        assert "<a" not in html
        assert "href" not in html
        visible(html)


def test_a_link_to_any_other_scheme_shows_its_text_alone() -> None:
    assert render_telegram("[file](ftp://host/f) [here](/relative) [top](#top)") == [
        "file here top"
    ]


def test_nested_lists_are_bullet_and_number_lines_indented_under_their_parent() -> None:
    answer = "- fruit\n  - apple\n  - pear\n    1. ripe\n    2. green\n- veg\n\n3. three\n4. four"
    assert render_plain(answer, TELEGRAM_LIMIT) == [
        "• fruit\n  • apple\n  • pear\n    1. ripe\n    2. green\n• veg\n\n3. three\n4. four"
    ]


def test_a_loose_list_keeps_a_blank_line_between_items() -> None:
    assert render_plain("- one\n\n- two\n\n  more", TELEGRAM_LIMIT) == ["• one\n\n• two\n\n  more"]


def test_headings_are_bold_lines() -> None:
    assert render_telegram("# Title\n\nText\n\n### Sub *part*\nSetext\n======") == [
        "<b>Title</b>\n\nText\n\n<b>Sub <i>part</i></b>\n\n<b>Setext</b>"
    ]


def test_a_narrow_table_is_an_aligned_monospace_block() -> None:
    answer = "| name | qty |\n|:-----|----:|\n| apple | 3 |\n| fig | 12 |"
    assert render_telegram(answer) == ["<pre>name   qty\n─────  ───\napple    3\nfig     12</pre>"]


def test_a_wide_table_becomes_a_few_lines_per_row() -> None:
    answer = (
        "| City | Country | Population |\n|---|---|---|\n"
        "| Reykjavik | Iceland | about 140 000 people |\n| Bern | Switzerland | 140 000 |"
    )
    assert render_telegram(answer) == [
        "<b>Reykjavik</b>\nCountry: Iceland\nPopulation: about 140 000 people\n\n"
        "<b>Bern</b>\nCountry: Switzerland\nPopulation: 140 000"
    ]


def test_a_table_with_links_keeps_them_clickable_as_lines() -> None:
    answer = "| site | note |\n|---|---|\n| [ex](https://example.com) | ok |"
    assert render_telegram(answer) == ['<b><a href="https://example.com">ex</a></b>\nnote: ok']


def test_a_blockquote_is_a_blockquote_and_a_nested_quote_joins_it() -> None:
    assert render_telegram("> said **this**\n>\n> > and that\n\nafter") == [
        "<blockquote>said <b>this</b>\n\nand that</blockquote>\n\nafter"
    ]


def test_raw_html_in_the_answer_is_shown_as_escaped_text() -> None:
    answer = '<script>alert("x")</script>\n\nInline <b onclick="x">bold?</b> and <img src=x>'
    html = render_telegram(answer)[0]
    assert html == (
        '&lt;script&gt;alert("x")&lt;/script&gt;\n\n'
        'Inline &lt;b onclick="x"&gt;bold?&lt;/b&gt; and &lt;img src=x&gt;'
    )
    assert (
        visible(html)
        == '<script>alert("x")</script>\n\nInline <b onclick="x">bold?</b> and <img src=x>'
    )


def test_ampersands_and_angle_brackets_are_escaped() -> None:
    assert render_telegram("a & b < c > d &amp; &lt;") == ["a &amp; b &lt; c &gt; d &amp; &lt;"]


def test_an_image_is_a_link_to_it() -> None:
    assert render_telegram("![a cat](https://example.com/cat.png)") == [
        '<a href="https://example.com/cat.png">🖼 a cat</a>'
    ]
    assert render_plain("![a cat](https://example.com/cat.png)", 100) == [
        "🖼 a cat (https://example.com/cat.png)"
    ]


def test_a_horizontal_rule_is_a_line() -> None:
    assert render_plain("above\n\n---\n\nbelow", 100) == ["above\n\n──────────\n\nbelow"]


def test_line_breaks_inside_a_paragraph_stay_line_breaks() -> None:
    assert render_telegram("roses are red\nviolets are blue") == ["roses are red\nviolets are blue"]


def test_an_answer_with_nothing_to_show_has_no_chunks() -> None:
    assert render_telegram("") == []
    assert render_telegram("  \n\n ") == []
    assert render_plain("", 100) == []
    assert render_discord("\n") == []


# -- plain text


def test_plain_text_leaves_no_markup_and_shows_link_targets() -> None:
    answer = "# Title\n\n**bold** `code` [docs](https://example.com) <https://x.org>\n\n```py\nx = 1\n```"
    assert render_plain(answer, TELEGRAM_LIMIT) == [
        "Title\n\nbold code docs (https://example.com) https://x.org\n\nx = 1"
    ]


def test_each_telegram_chunk_carries_its_plain_text_for_a_refused_html() -> None:
    chunks = telegram_chunks("[docs](https://example.com) & **more**")
    assert [(c.html, c.text) for c in chunks] == [
        (
            '<a href="https://example.com">docs</a> &amp; <b>more</b>',
            "docs (https://example.com) & more",
        )
    ]


# -- Discord


def test_discord_passes_markdown_through() -> None:
    answer = "**bold** *it* `code` [l](https://example.com)\n\n- a\n  - b\n\n> quote"
    assert render_discord(answer) == [answer]


def test_discord_mass_mentions_are_neutralized() -> None:
    (message,) = render_discord("hey @everyone and @here, also @Everyone in `@here`")
    assert "@everyone" not in message.lower()
    assert "@here" not in message.lower()
    assert message == ("hey @\u200beveryone and @\u200bhere, also @\u200bEveryone in `@\u200bhere`")


def test_discord_tables_become_aligned_code_blocks() -> None:
    answer = "| a | bb |\n|---|---:|\n| 1 | [x](https://e.com) |"
    assert render_discord(answer) == [
        "```\na  " + " " * 15 + "bb\n─  " + "─" * 17 + "\n1  x (https://e.com)\n```"
    ]


def test_discord_code_keeps_its_language_and_cannot_close_early() -> None:
    assert render_discord("```js\nlet s = '```';\n```") == [
        "```js\nlet s = '`\u200b`\u200b`';\n```"
    ]
    assert render_discord("    indented") == ["```\nindented\n```"]


def test_discord_headings_use_what_discord_draws() -> None:
    assert render_discord("Setext\n===\n\n#### deep") == ["# Setext\n\n**deep**"]


def test_a_discord_code_block_longer_than_the_limit_is_split_into_fenced_blocks() -> None:
    lines = [f"    value_{k} = compute({k})" for k in range(200)]
    chunks = render_discord("```python\n" + "\n".join(lines) + "\n```")
    assert len(chunks) > 1
    code = []
    for message in chunks:
        assert utf16_len(message) <= DISCORD_LIMIT
        assert message.startswith("```python\n")
        assert message.endswith("\n```")
        code.append(message.removeprefix("```python\n").removesuffix("\n```"))
    assert "\n".join(code).split("\n") == lines


# -- chunking


def test_a_10k_answer_is_telegram_chunks_within_the_limit_well_formed_and_complete() -> None:
    answer = sample_answer()
    assert len(answer) >= 10_000
    chunks = telegram_chunks(answer)
    assert len(chunks) >= 3
    texts = []
    for part in chunks:
        text = visible(part.html)
        assert utf16_len(text) <= TELEGRAM_LIMIT
        assert utf16_len(part.text) <= TELEGRAM_LIMIT
        assert check(part.html).entities <= TELEGRAM_MAX_ENTITIES
        texts.append(text)
    assert_same_text(texts, visible(to_html(chat_document(answer))))
    assert_same_text([part.text for part in chunks], chat_document(answer).text)


def test_a_10k_answer_is_discord_and_plain_chunks_within_their_limits() -> None:
    answer = sample_answer()
    discord = render_discord(answer)
    assert len(discord) >= 6
    for message in discord:
        assert utf16_len(message) <= DISCORD_LIMIT
        assert message.count("```") % 2 == 0
    plain = render_plain(answer, 1000)
    assert all(utf16_len(part) <= 1000 for part in plain)
    assert_same_text(plain, chat_document(answer).text)


def test_an_answer_within_the_limit_is_one_chunk() -> None:
    answer = "word " * 819  # 4094 characters after the trailing space goes
    assert len(render_telegram(answer)) == 1


def test_a_code_block_longer_than_the_limit_is_split_into_closed_blocks() -> None:
    lines = [f"line_{k} = {k}  # <{k}>" for k in range(400)]
    chunks = render_telegram("Intro.\n\n```python\n" + "\n".join(lines) + "\n```")
    assert len(chunks) > 2
    # The block is too long for any one message, so it starts right after the intro.
    assert chunks[0].startswith('Intro.\n\n<pre><code class="language-python">line_0 = 0')
    chunks[0] = chunks[0].removeprefix("Intro.\n\n")
    code = []
    for html in chunks:
        assert html.startswith('<pre><code class="language-python">')
        assert html.endswith("</code></pre>")
        text = visible(html)
        assert utf16_len(text) <= TELEGRAM_LIMIT
        code.append(text)
    assert "\n".join(code).split("\n") == lines


def test_a_code_block_that_fits_is_never_split_but_moves_to_the_next_chunk() -> None:
    prose = "Some words here. " * 180
    code = "\n".join(f"x_{k} = {k}" for k in range(250))
    chunks = render_telegram(f"{prose}\n\n```\n{code}\n```")
    assert len(chunks) == 2
    assert chunks[1] == f"<pre>{code}</pre>"


def test_a_cut_inside_code_keeps_the_next_lines_indentation() -> None:
    body = "\n".join(f"    if k == {k}:\n        return {k}" for k in range(500))
    plain = render_plain(f"```\ndef f(k):\n{body}\n```", 500)
    assert len(plain) > 10
    assert "\n".join(plain) == f"def f(k):\n{body}"


def test_cuts_prefer_paragraphs_then_lines_then_words() -> None:
    paragraphs = [f"Paragraph {k}. " + "text " * 190 for k in range(6)]
    chunks = render_plain("\n\n".join(paragraphs), TELEGRAM_LIMIT)
    assert [part.split("\n\n") for part in chunks] == [
        [p.strip() for p in paragraphs[0:4]],
        [p.strip() for p in paragraphs[4:6]],
    ]

    lines = [f"line {k} " + "x" * 90 for k in range(80)]
    for part in render_plain("\n".join(lines), TELEGRAM_LIMIT):
        assert all(line in lines for line in part.split("\n"))

    words = [f"w{k}" for k in range(3000)]
    for part in render_plain(" ".join(words), TELEGRAM_LIMIT):
        assert all(word in words for word in part.split(" "))


def test_a_chunk_does_not_start_with_a_lone_heading_when_room_remains() -> None:
    chunks = render_plain("# Title\n\n" + "word " * 2000, TELEGRAM_LIMIT)
    assert chunks[0].startswith("Title\n\nword word")


def test_bold_cut_across_chunks_is_closed_and_reopened() -> None:
    chunks = render_telegram("**" + "strong words " * 600 + "end**")
    assert len(chunks) == 2
    for html in chunks:
        assert html.startswith("<b>")
        assert html.endswith("</b>")
        visible(html)


def test_emoji_at_a_cut_are_never_split() -> None:
    # An odd offset puts Telegram's 4096th unit in the middle of a surrogate pair.
    chunks = render_telegram("a" + "😀" * 3000)
    assert len(chunks) == 2
    for html in chunks:
        assert utf16_len(html) <= TELEGRAM_LIMIT
        html.encode("utf-8")  # a lone surrogate would not encode
        units = html.encode("utf-16-le")
        assert units.decode("utf-16-le") == html
    assert "".join(chunks) == "a" + "😀" * 3000


def test_emoji_sequences_and_flags_at_a_cut_stay_whole() -> None:
    family = "👨\u200d👩\u200d👧"
    for unit, count in ((family, 900), ("🇩🇪", 1500), ("e\u0301", 3000), ("👍🏽", 1500)):
        chunks = render_plain(unit * count, TELEGRAM_LIMIT)
        assert len(chunks) > 1
        for part in chunks:
            assert utf16_len(part) <= TELEGRAM_LIMIT
            assert part == unit * (len(part) // len(unit)), unit
        assert "".join(chunks) == unit * count


def test_a_long_url_is_never_split() -> None:
    url = "https://example.com/" + "segment/" * 40 + "end"
    prose = "word " * 790
    for answer in (f"{prose}{url} after", f"{prose}[the docs]({url}) after"):
        telegram = render_telegram(answer)
        assert len(telegram) == 2
        assert telegram[1].startswith(f'<a href="{url}">') or telegram[1].startswith(url)
        plain = render_plain(answer, TELEGRAM_LIMIT)
        assert sum(url in part for part in plain) == 1
    discord = render_discord(f"{'word ' * 360}[the docs]({url}) after")
    assert sum(f"[the docs]({url})" in part for part in discord) == 1


def test_a_chunk_opens_at_most_100_entities() -> None:
    chunks = render_telegram("**w** " * 450)
    assert len(chunks) == 5
    for html in chunks:
        assert check(html).entities <= TELEGRAM_MAX_ENTITIES


def test_a_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 64"):
        render_plain("text", 10)


# -- properties

_FRAGMENTS = st.sampled_from(
    [
        "word", "longerword", " ", " ", "\n", "\n\n", "**", "*", "_", "`", "~~", "# ", "- ", "1. ",
        "> ", "```py\n", "```\n", "    ", "[link](https://example.com/a_b)", "<https://x.org/p>",
        "[bad](javascript:alert(1))", "![img](https://e.com/i.png)", "<script>", "&", "&amp;", "<",
        '"', "😀", "👨\u200d👩\u200d👧", "🇩🇪", "e\u0301", "é", "中文", "|a|b|\n|-|-|\n|1|2|\n",
        "x" * 70, "https://example.com/" + "y" * 80, "@everyone", "\\*", "  - ", "\t", "> > ",
        "~~~\n", "[" + "long link text " * 8 + "](https://e.com/l)", "|wide cell " + "z" * 40 + "|",
    ]
)  # fmt: skip
_ANSWERS = st.lists(_FRAGMENTS, max_size=120).map("".join)


@settings(max_examples=300, deadline=None)
@given(answer=_ANSWERS, limit=st.integers(64, 400))
def test_any_answer_is_telegram_chunks_within_the_limit_well_formed_and_complete(
    answer: str, limit: int
) -> None:
    chunks = telegram_chunks(answer, limit)
    texts = []
    for part in chunks:
        text = visible(part.html)
        assert text.strip()
        assert utf16_len(text) <= limit
        assert utf16_len(part.text) <= limit
        assert check(part.html).entities <= TELEGRAM_MAX_ENTITIES
        part.html.encode("utf-8")
        texts.append(text)
    assert_same_text(texts, visible(to_html(chat_document(answer))))


@settings(max_examples=200, deadline=None)
@given(answer=_ANSWERS, limit=st.integers(64, 400))
def test_any_answer_is_plain_and_discord_chunks_within_the_limit(answer: str, limit: int) -> None:
    plain = render_plain(answer, limit)
    assert all(utf16_len(part) <= limit for part in plain)
    assert_same_text(plain, chat_document(answer).text)
    for message in render_discord(answer, limit):
        assert message.strip()
        assert utf16_len(message) <= limit
        message.encode("utf-8")
