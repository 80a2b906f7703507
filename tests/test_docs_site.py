"""The documentation site: `mkdocs build --strict` passes (a broken link between pages, a missing anchor, a
page left out of the navigation or a docstring that does not render fails it), its API reference is read
from the source without importing the project, README.md stays a short front page, and every relative
link of README.md and of docs/ leads to a file that exists (and to a heading that exists)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.cli import REPO_ROOT
from support.docs import DOCS, README, headings

README_MAX_LINES = 250
PROJECT_PACKAGES = ("hyperagents", "run_optimization", "services", "domains", "search", "archive", "optimizer",
                    "inside", "agent", "task_agent", "meta_agent")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


def slug(title: str) -> str:
    """A heading's anchor as MkDocs' table of contents makes it (and GitHub, for these headings)."""
    text = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def prose(text: str) -> str:
    """`text` without fenced code and code spans, where a `](...)` is no link."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown file, with the files its snippets include read in."""
    text = _SNIPPET.sub(lambda m: (REPO_ROOT / m.group(1)).read_text(encoding="utf-8"),
                        page.read_text(encoding="utf-8"))
    return {slug(title) for _, _, title in headings(text)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not this checkout's
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def test_the_readme_is_a_short_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the rest belongs on a page of docs/"
    titles = [title for _, level, title in headings("\n".join(lines)) if level == 2]
    assert {"Set up", "Tests"} <= set(titles)  # what .ci/run mirrors (tests/test_readme_setup.py)
    assert "](docs/dashboard.png)" in "\n".join(lines)


def test_every_relative_link_of_the_readme_and_the_pages_resolves():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 10
    assert [b for page in pages for b in broken_links(page)] == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading's `name`\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-headings-name) [gone](missing.md) [no](other.md#nowhere) "
                    "[web](https://example.org/x.md) `[code](missing.md)`\n```\n[fenced](missing.md)\n```\n")
    assert broken_links(page) == ["page.md: missing.md (no such file)", "page.md: other.md#nowhere (no such heading)"]


def test_every_page_is_in_the_navigation_and_the_site_output_is_not_committed():
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())

    def pages(nav) -> list[str]:
        found = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found += pages(value) if isinstance(value, list) else [value]
        return found

    assert sorted(pages(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{config['site_dir']}/index.html"], cwd=REPO_ROOT)
    assert ignored.returncode == 0, f"{config['site_dir']}/ is not in .gitignore"


@pytest.mark.e2e
def test_the_site_builds_strictly_without_importing_the_project(tmp_path):
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(tmp_path / "site")], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-5000:]  # no mkdocs: the docs extra (in dev), pip install -e ".[docs]"
    imported = re.findall(r"^import time:.*\|\s+([\w.]+)\s*$", r.stderr, re.M)
    assert any(m.startswith("mkdocstrings_handlers.python") for m in imported)  # the API reference's reader
    assert [m for m in imported if m.split(".")[0] in PROJECT_PACKAGES] == []
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    for name in ("hyperagents.run", "hyperagents.Task", "hyperagents.RunView", "hyperagents.UserError",
                 "search.parent_selection.ParentSelection", "search.promotion.PromotionRule",
                 "search.best_choice.BestChoiceRule", "search.novelty.NoveltyMeasure"):
        assert f'id="{name}"' in reference, name
    architecture = (tmp_path / "site" / "architecture" / "index.html").read_text()
    assert "Layout: layers with one direction" in architecture  # DESIGN.md, included as it is
    assert "Attacks the suite runs" in (tmp_path / "site" / "security" / "index.html").read_text()
