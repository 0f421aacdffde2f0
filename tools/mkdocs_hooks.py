"""MkDocs hooks (mkdocs.yml `hooks:`): the pages that live outside docs/ and links that leave it.

The changelog, the contributing guide and the research archive are written where they belong in
the repository (CHANGELOG.md, CONTRIBUTING.md, research/), so GitHub shows them there and their
links are relative to those places. `on_files` brings them into the site; `on_page_markdown`
rewrites each page's relative links by repository path: a link to a file the site holds becomes
a link to its page, a link to anything else (source code, raw results, the README) becomes a
link into the repository (`repo_url` in mkdocs.yml) or, without one, the path as code text. The
docs pages thus keep links that work on GitHub, and `mkdocs build --strict` finds no broken one.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

# repository path (a glob) -> where it goes in the site, relative to docs/
BROUGHT_IN = {
    "CHANGELOG.md": "changelog.md",
    "CONTRIBUTING.md": "contributing.md",
    "research/README.md": "research/README.md",
    "research/records/*.md": "research/records/",
}

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)[\s\S]*?(?<!`)\1(?!`)")
_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\((?P<url><[^<>\n]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
    r"(?P<title>\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REFERENCE = re.compile(r"^(?P<lead> {0,3}\[[^\]\n]+\]:[ \t]*)(?P<url><[^<>\n]*>|\S+)", re.M)


def brought_in(repo_root: str) -> dict[str, str]:
    """Repository path -> site path (relative to docs/) of each file outside docs/ that the
    site includes; a file that does not exist is left out."""
    out = {}
    for pattern, site in BROUGHT_IN.items():
        for path in sorted(glob.glob(os.path.join(repo_root, pattern))):
            rel = os.path.relpath(path, repo_root).replace(os.sep, "/")
            out[rel] = site + posixpath.basename(rel) if site.endswith("/") else site
    return out


def _site_target(target: str, pages: Mapping[str, str]) -> str | None:
    """The site path of repository path `target` (a file or a folder with an index page)."""
    for candidate in (target, f"{target}/index.md", f"{target}/README.md"):
        if candidate in pages:
            return pages[candidate]
    if target.startswith("docs/"):  # a docs file the site lacks: mkdocs names it
        return target.removeprefix("docs/")
    return None


def resolve_link(url: str, page: str, pages: Mapping[str, str], repo_url: str = "",
                 image: bool = False, exists: Callable[[str], bool] | None = None) -> str | None:
    """The URL a link `url` on the page at repository path `page` should have in the site.

    pages maps repository paths to site paths (relative to docs/) for every file the site
    holds. External, absolute and same-page links come back unchanged, as do links between two
    docs/ files (mkdocs checks those itself). A link to a file the site holds comes back
    relative to the page's place in the site; a link to any other file of the repository comes
    back as a `repo_url` link (`blob`, or `raw` for an image), or None without a repo_url: the
    caller then writes the path as text. `exists(path)` says whether a repository path exists;
    a link to one that does not comes back unchanged, so that mkdocs reports it as broken.
    """
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("/", "\\")) or not parts.path:
        return url
    page_site = pages.get(page, page.removeprefix("docs/"))
    target = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(parts.path)))
    if target == ".." or target.startswith("../"):  # outside the repository: mkdocs reports it
        return url
    if page.startswith("docs/") and target.startswith("docs/"):
        return url
    site = _site_target(target, pages)
    if site is not None:
        rel = posixpath.relpath(site, posixpath.dirname(page_site) or ".")
        return urlunsplit(("", "", rel, parts.query, parts.fragment))
    if exists is not None and not exists(target):
        return url
    if not repo_url:
        return None
    kind = "raw" if image else "blob"
    return urlunsplit(("", "", f"{repo_url.rstrip('/')}/{kind}/HEAD/{target}", parts.query,
                       parts.fragment))


def _as_text(text: str, url: str, page: str) -> str:
    """A link to a repository file with nowhere to point: its text, and its path as code."""
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page),
                                             unquote(urlsplit(url).path)))
    bare = text.strip("`").rstrip("/")
    if not bare or bare == path or bare == url.rstrip("/"):
        return f"`{path}`"
    return f"{text} (`{path}`)"


def _rewrite_prose(text: str, page: str, pages: Mapping[str, str], repo_url: str,
                   exists: Callable[[str], bool] | None) -> str:
    # Links are found in the text with its code spans blanked out (a link's text may hold one,
    # and brackets inside one are not Markdown), then rewritten from the original text.
    masked = _CODE_SPAN.sub(lambda m: "\0" * len(m[0]), text)
    out, last = [], 0
    for m in _LINK.finditer(masked):
        if "\0" in m["url"]:  # the "URL" lies in a code span: not a link
            continue
        label, title = text[m.start("text"):m.end("text")], m["title"] or ""
        url = m["url"].removeprefix("<").removesuffix(">")
        new = resolve_link(url, page, pages, repo_url, image=bool(m["bang"]), exists=exists)
        if new is None:
            replacement = _as_text(label, url, page)
        elif new == url:
            replacement = text[m.start():m.end()]
        else:
            replacement = f"{m['bang']}[{label}]({new}{title})"
        out += [text[last:m.start()], replacement]
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def rewrite_links(markdown: str, page: str, pages: Mapping[str, str], repo_url: str = "",
                  exists: Callable[[str], bool] | None = None) -> str:
    """The markdown of the page at repository path `page` with its relative links mapped into
    the site (resolve_link; pages: repository path -> site path). Inline links and images
    are rewritten outside code spans and fenced code blocks; reference definitions are
    rewritten where resolve_link gives a URL (without repo_url a definition pointing at a
    repository file stays as it is, and mkdocs reports it)."""
    def reference(m: re.Match) -> str:
        url = m["url"].removeprefix("<").removesuffix(">")
        new = resolve_link(url, page, pages, repo_url, exists=exists)
        return m[0] if new is None or new == url else m["lead"] + new

    blocks, prose, fence = [], [], None
    for line in markdown.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is None and opened:
            blocks.append(_rewrite_prose("".join(prose), page, pages, repo_url, exists))
            prose, fence = [], opened[1]
            blocks.append(line)
        elif fence is not None:
            blocks.append(line)
            if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence):
                fence = None
        else:
            prose.append(_REFERENCE.sub(reference, line))
    blocks.append(_rewrite_prose("".join(prose), page, pages, repo_url, exists))
    return "".join(blocks)


def _repo_root(config) -> str:
    return os.path.dirname(os.path.abspath(config.config_file_path))


def repo_pages(files, repo_root: str) -> dict[str, str]:
    """Repository path -> site path of every file in the site that comes from the repository
    (the theme's own files are left out)."""
    out = {}
    for f in files:
        if not f.abs_src_path:
            continue
        rel = os.path.relpath(f.abs_src_path, repo_root).replace(os.sep, "/")
        if not rel.startswith("../"):
            out[rel] = f.src_uri
    return out


def on_files(files, config):
    """Adds the pages kept outside docs/ (BROUGHT_IN) to the site, read from where they are."""
    from mkdocs.structure.files import File

    root = _repo_root(config)
    for rel, site in brought_in(root).items():
        if files.get_file_from_path(site) is None:
            files.append(File.generated(config, site, abs_src_path=os.path.join(root, rel)))
    return files


def on_page_markdown(markdown, page, config, files):
    root = _repo_root(config)
    pages = repo_pages(files, root)
    src = os.path.relpath(page.file.abs_src_path, root).replace(os.sep, "/") \
        if page.file.abs_src_path else f"docs/{page.file.src_uri}"
    return rewrite_links(markdown, src, pages, config.get("repo_url") or "",
                         exists=lambda path: os.path.exists(os.path.join(root, path)))


def on_serve(server, config, builder):
    """`mkdocs serve` rebuilds when a page kept outside docs/ changes."""
    root = _repo_root(config)
    for rel in brought_in(root):
        server.watch(os.path.join(root, rel))
    return server
