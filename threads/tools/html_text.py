"""The readable text of an HTML page, for a model: the title and the words, no markup.

A small extractor on the standard library's ``html.parser``: it runs no
script, loads nothing, and drops what a reader does not see (scripts,
styles, templates, SVG, the head but its title). Block elements start new
lines; runs of blank space collapse; links keep their target in brackets.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object"})
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
        "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table",
        "td", "th", "tr", "ul",
    }
)  # fmt: skip
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._hidden = 0
        self._in_title = False
        self._href: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _HIDDEN:
            if tag not in _VOID:
                self._hidden += 1
        elif not self._hidden:
            if tag in _BLOCKS:
                self.parts.append("\n")
            if tag == "li":
                self.parts.append("- ")
            if tag == "a":
                self._href.append(dict(attrs).get("href"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif not self._hidden:
            if tag == "a" and self._href:
                href = self._href.pop()
                if href and href.startswith(("http://", "https://")):
                    self.parts.append(f" [{href}]")
            if tag in _BLOCKS:
                self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._hidden:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """The page's title and its readable text."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).split("\n"))
    text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    title = _SPACES.sub(" ", " ".join(parser.title)).strip()
    return title, text
