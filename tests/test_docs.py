"""The user guide's short commands run, and its links resolve.

A fenced block in docs/*.md whose info string is ``bash test`` or ``python test`` is run
(docs/README.md, "How these pages stay true"), in one temporary directory with links to
the repository's docs/ and examples/: the quickstart's blocks first (its tiny run is the
one later pages evaluate and export), then each page's in the order docs/README.md lists
them.
Every page of docs/ must be linked from README.md, and every relative link of README.md
and docs/ must name a file that exists (and a heading of it, for ``page.md#anchor``)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def guide_pages() -> list[Path]:
    """The pages in the order docs/README.md lists them, then any it does not list."""
    listed = [DOCS / target for target in LINK.findall((DOCS / "README.md").read_text())
              if target.endswith(".md") and "/" not in target]
    rest = sorted(set(DOCS.glob("*.md")) - set(listed) - {DOCS / "README.md"})
    return [page for page in listed if page.exists()] + rest


def blocks_to_run(page: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of the blocks marked for testing, in page order."""
    blocks = []
    for info, code in FENCE.findall(page.read_text()):
        words = info.split()
        if len(words) == 2 and words[1] == "test":
            if words[0] not in ("bash", "python"):
                raise AssertionError(f"{page.name}: a tested block must be bash or python, got {info!r}")
            blocks.append((words[0], code))
    return blocks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The directory the blocks run in, with the quickstart's blocks run (its tiny run is
    the one later pages use), so that any page's test can run alone."""
    work = tmp_path_factory.mktemp("docs")
    for name in ("docs", "examples"):
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    for language, code in blocks_to_run(DOCS / "quickstart.md"):
        result = _run(language, code, work)
        assert result.returncode == 0, f"quickstart.md: {code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return work


def _run(language: str, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


PAGES = guide_pages()


def test_the_guide_has_tested_commands():
    assert sum(len(blocks_to_run(page)) for page in PAGES) >= 10
    assert blocks_to_run(DOCS / "quickstart.md"), "the quickstart's tiny run makes the run later pages use"


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_the_commands_of_a_page_run(page, workdir):
    if page.name == "quickstart.md":  # run by the fixture
        return
    for language, code in blocks_to_run(page):
        result = _run(language, code, workdir)
        assert result.returncode == 0, f"{page.name}: {code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {github_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(FENCE.sub("", page.read_text()))
            if not re.match(r"^[a-z]+:", target)]   # http:, https:, mailto:


MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_relative_links_resolve(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{page.relative_to(ROOT)} links to {target}: no such heading"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    missing = [page.name for page in DOCS.glob("*.md") if page.resolve() not in linked]
    assert not missing, f"README.md does not link to docs/{', docs/'.join(missing)}"


def test_the_readme_is_short_and_ends_its_test_command_as_ci_does():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme, "the README's test command must be .ci/run's last line, word for word"


def test_the_readmes_results_are_the_results_pages():
    """Each row of the README's results table gives the figure of the generated results
    page for the same task (the default command at 100k env steps)."""
    readme = (ROOT / "README.md").read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    page = (DOCS / "results.md").read_text()
    rows = [line.split("|")[1:-1] for line in readme.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows and rows[0][0].strip() == "task"
    for task, runs, score, *_ in (map(str.strip, row) for row in rows[1:]):
        assert re.search(rf"^\| {re.escape(task)} \| {runs} \([^)]*\) \| 10 \| {re.escape(score)} \|", page, re.M), \
            f"README.md's {task} row ({runs} runs, {score}) is not the results page's"
