"""``report.html``: report.md as one self-contained page to send, its SVG pictures inlined. No torch.

The markdown is the report's own (headings, paragraphs, lists, tables, fenced
text charts, images, inline code and bold), so this renders exactly that
subset rather than pulling in a markdown library. Every text is escaped; an
image link is inlined only when it names an SVG in the report's folder (the
pictures the report wrote), anything else stays a link.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
pre { background: #f5f5f5; padding: .6rem; overflow-x: auto; font-size: 13px; line-height: 1.25; }
code { background: #f5f5f5; padding: 0 .2rem; }
table { border-collapse: collapse; margin: .6rem 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: .2rem .5rem; text-align: left; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; }
"""

_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")


def _inline(text: str) -> str:
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
        else:
            esc = html.escape(part)
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", esc))
    return "".join(out)


def _svg(folder: Path, name: str) -> str | None:
    if "/" in name or "\\" in name or not name.endswith(".svg"):
        return None
    path = folder / name
    if not path.is_file():
        return None
    body = path.read_text("utf-8")
    start = body.find("<svg")
    return body[start:] if start >= 0 else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def render(markdown: str, folder: Path, title: str) -> str:
    """The page for ``markdown`` (report.md's text), inlining the SVGs it links from ``folder``."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
            continue
        if m := re.match(r"^(#{1,6}) (.*)$", line):
            n, slug = len(m.group(1)), re.sub(r"[^a-z0-9]+", "-", m.group(2).lower()).strip("-")
            out.append(f'<h{n} id="{slug}">{_inline(m.group(2))}</h{n}>')
        elif m := _IMAGE.match(line.strip()):
            alt, name = m.group(1), m.group(2)
            svg = _svg(folder, name)
            if svg is not None:
                out.append(
                    f'<figure data-src="{html.escape(name)}">{svg}<figcaption>{html.escape(alt)}</figcaption></figure>'
                )
            else:
                out.append(f'<p><a href="{html.escape(name)}">{html.escape(alt)}</a></p>')
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            body = [r for r in rows if not re.fullmatch(r"\|?[\s:|-]+\|?", r)]
            head, rest = _cells(body[0]), body[1:]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in _cells(r)) + "</tr>" for r in rest]
            out.append("</table>")
            continue
        elif re.match(r"^\s*- ", line):
            items = []
            while i < len(lines) and re.match(r"^\s*- ", lines[i]):
                items.append(f"<li>{_inline(lines[i].strip()[2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            para = [line.strip()]
            while i + 1 < len(lines) and lines[i + 1].strip() and not re.match(r"^(#|```|\||\s*- |!\[)", lines[i + 1]):
                i += 1
                para.append(lines[i].strip())
            out.append(f"<p>{_inline(' '.join(para))}</p>")
        i += 1
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(out)
        + "\n</body></html>\n"
    )
