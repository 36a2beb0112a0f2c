"""Check the links of the built docs site and of the README, offline.

``mkdocs build --strict`` already fails on a broken link or anchor between the docs' own
pages; this checks what it cannot see:

- the built site (``site/``): every relative ``href`` and ``src`` reaches a file of the site,
  and every ``#anchor`` an element of the page it points into (theme templates included);
- ``README.md`` (outside the site): every relative link reaches a file of the repository,
  and every ``#anchor`` into a docs page a heading of that page.

External links are listed by host and not fetched (CI has no network but PyPI's).
Exit status 1 with one line per broken link.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
# [text](target) in markdown, images included; targets in angle brackets are not used here.
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


class _Page(HTMLParser):
    """The ids and the link targets (href, src) of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif name in ("href", "src"):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def check_site(site: Path) -> tuple[list[str], Counter[str]]:
    """Broken links of the built site, and the external hosts it links to."""
    broken: list[str] = []
    hosts: Counter[str] = Counter()
    pages = {p: _parse(p) for p in site.rglob("*.html")}
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https"):
                hosts[parts.netloc] += 1
                continue
            if parts.scheme or link.startswith("//"):
                continue  # mailto:, data:, javascript: and the like
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # from the site's root (the 404 page's links)
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no anchor #{parts.fragment})")
    return broken, hosts


def _slug(heading: str) -> str:
    """The anchor mkdocs' toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(markdown: Path) -> set[str]:
    heads = re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", markdown.read_text(), flags=re.M)
    return {_slug(h) for h in heads}


def check_markdown(path: Path) -> list[str]:
    """Broken relative links (and anchors into markdown pages) of one markdown file."""
    broken = []
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for link in MD_LINK.findall(text):
        parts = urlsplit(link)
        if parts.scheme or link.startswith("#"):
            continue
        target = (path.parent / unquote(parts.path)).resolve()
        where = f"{path.relative_to(ROOT)}: {link}"
        if not target.exists():
            broken.append(f"{where} (no such file)")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target):
            broken.append(f"{where} (no heading #{parts.fragment})")
    return broken


def main() -> int:
    if not (SITE / "index.html").is_file():
        print(f"no built site in {SITE}: run `make docs`", file=sys.stderr)
        return 2
    broken, hosts = check_site(SITE)
    broken += check_markdown(ROOT / "README.md")
    pages = len(list(SITE.rglob("*.html")))
    external = ", ".join(f"{host} ({n})" for host, n in sorted(hosts.items()))
    print(f"links: {pages} pages and README.md checked")
    print(f"external links, not fetched: {external or 'none'}")
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
