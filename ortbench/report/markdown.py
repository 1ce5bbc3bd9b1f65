"""The markdown ortbench's reports write, as HTML for the run's page (markdown-it-py)."""

from __future__ import annotations

from markdown_it import MarkdownIt

# CommonMark with tables; the raw HTML ortbench writes (<details>) passes through
_PARSER = MarkdownIt("commonmark", {"html": True}).enable("table")
_RIGHT = "text-align:right"


def markdown_to_html(text: str, top_level: int = 2) -> str:
    """Markdown (CommonMark with tables and raw HTML) as HTML.

    Parameters
    ----------
    text : str
        Markdown as ortbench's reports write it; ``\\|`` is a pipe inside a table cell.
    top_level : int
        The HTML heading level of a ``#`` heading (the page's title is its only h1).

    Returns
    -------
    str
        HTML; the cells of right-aligned table columns get ``class="num"`` (the page's
        style sheet sets numbers in those).
    """
    tokens = _PARSER.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + top_level - 1, 6)}"
        elif token.type in ("th_open", "td_open") and token.attrGet("style") == _RIGHT:
            token.attrs.pop("style")
            token.attrSet("class", "num")
    return _PARSER.renderer.render(tokens, _PARSER.options, {})
