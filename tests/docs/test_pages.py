"""The pages under docs/ and README.md speak of the product: no text labelled by the work that
wrote it (an issue number, a working session, "today"; that history belongs in CHANGES.md), every
relative link reaching its file and heading, and docs/PERFORMANCE.md short enough to read as the
current figures (the logs of how each got there live beside their reports in docs/perf/)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
PERFORMANCE_MAX_LINES = 1200

# An issue number labels the work; "nghttp2 issues 1300" names another project's tracker.
ISSUE = re.compile(r"(?:\b([\w-]+)\s+)?\bissues?\s*\#?\d+\b", re.IGNORECASE)
NOT_A_PROJECT = {"a", "an", "and", "as", "by", "for", "from", "in", "of", "on", "per", "see"}
NOT_A_PROJECT |= {"that", "the", "this", "to", "under", "with"}
WORK_LABELS = re.compile(
    r"""
      (?<![\w&/\#])\#\d+\b                                  # "#" and a number (not an entity)
    | \bsessions?\s+\d+\b                                   # a numbered session
    | \b(?:this|that|other|earlier|previous|later)\s+sessions?\b
    | \bsessions'\s+(?:work|tests?|benchmarks?|runs?)\b
    | \b(?:today|yesterday|tonight)\b
    | \bthis\s+(?:VM|work|branch|PR|pull\s+request|ticket|task)\b
    | \bthe\s+brief\b
    | \bwork\s+items?\b
    """,
    re.IGNORECASE | re.VERBOSE,
)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+\s+(.*?)\s*$", re.MULTILINE)


def labels_in(text: str) -> list[str]:
    """Each line of `text` that labels itself by the work that produced it, with its number."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{number}: {match.group(0)!r}" for match in WORK_LABELS.finditer(line)]
        found += [
            f"{number}: {match.group(0)!r}"
            for match in ISSUE.finditer(line)
            if match.group(1) is None or match.group(1).lower() in NOT_A_PROJECT
        ]
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file, or whose heading in a Markdown file, is missing."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            headings = HEADING.findall(FENCE.sub("", dest.read_text()))
            if anchor not in {slug(h) for h in headings}:
                broken.append(target)
    return broken


def test_the_patterns_catch_work_labels_and_spare_the_product() -> None:
    n = 7  # any number: the samples are built so that no label stands in this file as written
    caught = [
        f"as issue {n} asked",
        f"Issue {n}: the benchmark again",
        f"fixed in #{n}",
        f"on 1fdf161 (session {n}, 18:11 UTC)",
        "shared with other sessions' tests",
        "measured on this VM today",
        "the branch before this work",
        "the brief says so",
    ]
    spared = [
        "a fetch session per leader (KIP-227)",
        "the two sessions' events on the same client bytes",
        "the member's session timeout",
        "[PERFORMANCE.md](PERFORMANCE.md#spark-ingest)",
        "&#8212; an entity",
        "measured on this machine",
        "nghttp2 issues 1300 and 2233",
        "aiohttp#1234",
    ]
    assert [line for line in caught if not labels_in(line)] == []
    assert [line for line in spared if labels_in(line)] == []


def test_no_page_labels_its_text_by_the_work_that_produced_it() -> None:
    found = {
        str(page.relative_to(REPO)): labels
        for page in PAGES
        if (labels := labels_in(page.read_text()))
    }
    assert found == {}


def test_every_relative_link_reaches_its_file_and_heading() -> None:
    found = {
        str(page.relative_to(REPO)): broken for page in PAGES if (broken := broken_links(page))
    }
    assert found == {}


def test_performance_page_stays_a_page_of_current_figures() -> None:
    lines = len((REPO / "docs" / "PERFORMANCE.md").read_text().splitlines())
    assert lines <= PERFORMANCE_MAX_LINES, (
        f"docs/PERFORMANCE.md has {lines} lines; move how a figure got there to "
        "docs/perf/<subject>/README.md beside its reports"
    )
