"""Markdown as the web chat's HTML: what a model writes can style an answer, never run in it."""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from channels.render.markdown import is_safe_link
from channels.render.web import WebRenderer

#: Every tag the renderer may produce, and the attributes each may carry.
ALLOWED = {
    **dict.fromkeys(
        [
            "p",
            "br",
            "strong",
            "em",
            "s",
            "code",
            "pre",
            "blockquote",
            "ul",
            "ol",
            "li",
            "hr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "table",
            "thead",
            "tbody",
            "tr",
            "span",
        ],
        frozenset({"class"}),
    ),
    "th": frozenset({"class"}),
    "td": frozenset({"class"}),
    "div": frozenset({"class"}),
    "button": frozenset({"type", "class"}),
    "ol": frozenset({"start"}),
    "a": frozenset({"href", "target", "rel"}),
}


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED:
            self.problems.append(f"<{tag}>")
            return
        for name, value in attrs:
            if name not in ALLOWED[tag]:
                self.problems.append(f"<{tag} {name}>")
            if name == "href" and not is_safe_link(value or ""):
                self.problems.append(f"href {value!r}")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read(html: str) -> _Reader:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader


def test_markup_a_model_writes_is_shown_as_text() -> None:
    html = WebRenderer().render(
        '<script>alert(1)</script> <img src=x onerror="alert(2)"> <b>bold</b>'
    )
    assert read(html).problems == []
    assert "<script>alert(1)</script>" in "".join(read(html).text)
    assert "onerror" not in html.replace("onerror=&quot;", "")


def test_markdown_becomes_headings_emphasis_lists_and_tables() -> None:
    html = WebRenderer().render(
        "## Result\n\n**bold**, *it*, ~~gone~~ and `code`\n\n- one\n- two\n\n"
        "| a | b |\n|---|--:|\n| 1 | 2 |"
    )
    for piece in (
        "<h2>Result</h2>",
        "<strong>bold</strong>",
        "<em>it</em>",
        "<s>gone</s>",
        "<code>code</code>",
        "<li>one</li>",
        '<div class="table"><table>',
        '<td class="align-right">2</td>',
    ):
        assert piece in html
    assert "style=" not in html  # the page's policy refuses inline styles


def test_a_code_block_comes_with_a_copy_button_and_its_language() -> None:
    html = WebRenderer().render('```python\nprint("<hi>")\n```')
    assert html.startswith('<div class="code"><span class="lang">python</span>')
    assert '<button type="button" class="copy">Copy</button>' in html
    assert '<code class="language-python">print(&quot;&lt;hi&gt;&quot;)' in html


def test_a_language_that_is_not_a_plain_word_is_left_out() -> None:
    html = WebRenderer().render('```"><script>x\ncode\n```')
    assert "lang" not in html
    assert read(html).problems == []


def test_links_open_only_safe_targets_in_a_new_tab_without_a_referrer() -> None:
    html = WebRenderer().render(
        "[ok](https://example.com/a?b=1) [ftp](ftp://example.com/f) [js](javascript:alert(1))"
    )
    assert (
        '<a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">'
        "ok</a>"
    ) in html
    assert "ftp://" not in html
    assert read(html).problems == []


def test_an_image_is_a_link_to_it_never_loaded() -> None:
    html = WebRenderer().render("![chart](https://example.com/c.png) ![x](javascript:alert(1))")
    assert "<img" not in html
    assert '<a href="https://example.com/c.png"' in html
    assert read(html).problems == []


def test_a_line_break_inside_a_paragraph_stays_a_break() -> None:
    assert WebRenderer().render("one\ntwo") == "<p>one<br />\ntwo</p>\n"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([*"<>\"'`*_[]()!#|-:=/ \n\tabcx&;", "javascript:", "http://a.b", " on"]),
        max_size=40,
    ).map("".join)
)
def test_whatever_is_written_the_html_holds_only_allowed_tags_and_safe_links(
    markdown: str,
) -> None:
    assert read(WebRenderer().render(markdown)).problems == []
