"""The markdown ortbench's reports write, as HTML for the run's page."""

from __future__ import annotations

import html
import re


def markdown_to_html(text: str, top_level: int = 2) -> str:
    """The markdown ortbench writes (headings, tables, code blocks, paragraphs) as HTML.

    Parameters
    ----------
    text : str
        Markdown as ortbench's reports write it.
    top_level : int
        The HTML heading level of a ``#`` heading (the page's title is its only h1).

    Returns
    -------
    str
        HTML; tables get ``class="num"`` on the cells of right-aligned columns.
    """
    out, table, code, paragraph = [], [], None, []

    def flush() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if table:
            rule = [r for r in table if re.fullmatch(r"\|[\s:|-]+\|", r)]
            rows = [r for r in table if r not in rule]
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            right = (
                [c.strip().endswith(":") for c in rule[0].strip().strip("|").split("|")]
                if rule
                else []
            )
            kind = [
                " class='num'" if k < len(right) and right[k] else "" for k in range(len(cells[0]))
            ]
            head = "".join(f"<th{kind[k]}>{_inline(c)}</th>" for k, c in enumerate(cells[0]))
            body = "".join(
                "<tr>"
                + "".join(
                    f"<td{kind[k] if k < len(kind) else ''}>{_inline(c)}</td>"
                    for k, c in enumerate(row)
                )
                + "</tr>"
                for row in cells[1:]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table.clear()

    for line in text.splitlines():
        if code is not None:
            if line.startswith("```"):
                out.append(f"<pre>{html.escape(chr(10).join(code))}</pre>")
                code = None
            else:
                code.append(line)
        elif line.startswith("```"):
            flush()
            code = []
        elif line.startswith("|"):
            if paragraph:
                flush()
            table.append(line)
        elif match := re.match(r"(#{1,6}) (.*)", line):
            flush()
            level = min(len(match.group(1)) + top_level - 1, 6)
            out.append(f"<h{level}>{_inline(match.group(2))}</h{level}>")
        elif not line.strip():
            flush()
        else:
            if table:
                flush()
            paragraph.append(line.strip())
    flush()
    return "\n".join(out)


def _inline(text: str) -> str:
    text = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
