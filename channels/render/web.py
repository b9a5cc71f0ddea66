"""Markdown as the web chat's HTML: rendered on the server, safe to put in the page as it is.

The parser is the one every channel uses (CommonMark, tables and
strikethrough) with raw HTML off, so whatever markup a model writes —
``<script>``, ``<img onerror=…>`` — arrives as escaped text. What markdown
itself can produce is narrowed further:

- a link opens only ``http``, ``https``, ``tg`` and ``mailto`` targets
  (:func:`~channels.render.markdown.is_safe_link`), in a new tab, without
  a referrer; a link to any other target is its text alone;
- an image is never loaded from where the model points: it is a link to it
  (the page's policy would block it anyway);
- a code block is framed with a copy button the page's script wires up, and
  names its language only when the name is a plain word;
- a line break inside a paragraph stays a break, as the model wrote it.

This HTML is the one thing the page inserts as markup (decision web-04).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from channels.render.markdown import code_language, is_safe_link

IMAGE = "🖼 "
_UNSAFE_LINKS = "unsafe_links"


class _ChatHtml(RendererHTML):
    """markdown-it's HTML renderer with the chat's rules for links, images and code."""

    def link_open(
        self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        href = str(tokens[idx].attrGet("href") or "")
        unsafe: list[bool] = env.setdefault(_UNSAFE_LINKS, [])
        unsafe.append(not is_safe_link(href))
        if unsafe[-1]:
            return ""
        return f'<a href="{escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">'

    def link_close(
        self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        unsafe: list[bool] = env.get(_UNSAFE_LINKS, [])
        return "" if unsafe and unsafe.pop() else "</a>"

    def image(self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        alt = escapeHtml(self.renderInlineAsText(token.children or [], options, env) or "image")
        src = str(token.attrGet("src") or "")
        if not is_safe_link(src):
            return f"{IMAGE}{alt}"
        return (
            f'<a href="{escapeHtml(src)}" target="_blank" rel="noopener noreferrer nofollow">'
            f"{IMAGE}{alt}</a>"
        )

    def table_open(
        self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        # A wide table scrolls inside its own box instead of widening the bubble.
        return '<div class="table"><table>\n'

    def table_close(
        self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return "</table></div>\n"

    def th_open(self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        return self._cell(tokens[idx], "th")

    def td_open(self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        return self._cell(tokens[idx], "td")

    def _cell(self, token: Token, tag: str) -> str:
        # Alignment as a class: the page's policy refuses inline style attributes.
        style = str(token.attrGet("style") or "")
        align = style.removeprefix("text-align:")
        if align in ("left", "center", "right"):
            return f'<{tag} class="align-{align}">'
        return f"<{tag}>"

    def fence(self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        return code_html(token.content, code_language(token.info))

    def code_block(
        self, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        return code_html(tokens[idx].content, "")


def code_html(code: str, language: str) -> str:
    """A code block with its copy button (and its language, when it names one)."""
    label = f'<span class="lang">{escapeHtml(language)}</span>' if language else ""
    cls = f' class="language-{escapeHtml(language)}"' if language else ""
    return (
        f'<div class="code">{label}<button type="button" class="copy">Copy</button>'
        f"<pre><code{cls}>{escapeHtml(code)}</code></pre></div>\n"
    )


class WebRenderer:
    """Renders answers for the web chat; one per channel (building the parser costs ~0.1 ms).

    The last few renderings are kept: a streamed answer's last draft is
    usually the answer itself, and a reconnect renders the history again.
    """

    def __init__(self, *, keep: int = 64) -> None:
        self._md = MarkdownIt(
            "commonmark", {"html": False, "breaks": True}, renderer_cls=_ChatHtml
        ).enable(["table", "strikethrough"])
        self._keep = keep
        self._kept: OrderedDict[str, str] = OrderedDict()

    def render(self, markdown: str) -> str:
        """``markdown`` as HTML the page may insert as it is."""
        html = self._kept.get(markdown)
        if html is None:
            html = self._kept[markdown] = str(self._md.render(markdown, {}))
            if len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(markdown)
        return html
