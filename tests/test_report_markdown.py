"""Markdown as the run's page shows it: read back with the standard library's HTML parser."""

from __future__ import annotations

from html.parser import HTMLParser

from ortbench.report.markdown import markdown_to_html

TEXT = """# Cells without a measurement

Every cell is **not** timed twice.

| contender | batch size | status |
|---|---:|---|
| ort-full | 15 | failed: ValueError: shape (3\\|4) \\| (5) |
| ort-fwbw | 256 | ok |

<details><summary>How it was measured</summary>

The slope between a short fit and a long one.

</details>
"""


class _Elements(HTMLParser):
    """Every element's tag and attributes, the text of each table cell, and the text
    outside any element's markup."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[list[str]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._open.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        self._open.pop()
        if tag in ("td", "th"):
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        self.text.append((tuple(self._open), data))


def _parse(text: str, top_level: int = 2) -> _Elements:
    parser = _Elements()
    parser.feed(markdown_to_html(text, top_level))
    parser.close()
    return parser


def test_an_escaped_pipe_stays_inside_its_cell():
    rows = _parse(TEXT).rows
    assert rows == [
        ["contender", "batch size", "status"],
        ["ort-full", "15", "failed: ValueError: shape (3|4) | (5)"],
        ["ort-fwbw", "256", "ok"],
    ]


def test_bold_text_is_bold_and_numbers_are_right_aligned():
    page = _parse(TEXT)
    assert ((("p", "strong"), "not")) in page.text
    assert not any("**" in data for _, data in page.text)
    cells = [attrs.get("class") for tag, attrs in page.tags if tag in ("th", "td")]
    assert cells == [None, "num", None] * 3


def test_details_stays_a_folded_section_and_headings_move_down():
    page = _parse(TEXT, top_level=3)
    tags = [tag for tag, _ in page.tags]
    assert tags.count("details") == 1 and tags.count("summary") == 1
    assert ("details", "p") in [open_ for open_, _ in page.text]  # markdown inside it
    assert not any("<details>" in data for _, data in page.text)
    assert "h3" in tags and "h1" not in tags and "h2" not in tags
