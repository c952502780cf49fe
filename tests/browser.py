"""Headless Chromium for the dashboard tests: Debian's `chromium`, driven by Playwright for
Python, and where its screenshots go (kept by CI as artefacts)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / ".mesh" / "artifacts"

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(),
    reason="Debian's chromium is not installed (apt-get install chromium; .ci/run does)")


@dataclass
class Visit:
    """A page and what it did that it should not: requests to other origins, script errors."""

    page: Page
    outside: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def browse(base: str, *, allowed: tuple[str, ...] = ("blob:", "data:")) -> Iterator[Visit]:
    """A fresh headless page; requests that leave `base` (and `allowed`) are recorded."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            visit = Visit(page)
            page.on("request", lambda r: None if r.url.startswith((base, *allowed))
                    else visit.outside.append(r.url))
            page.on("pageerror", lambda exc: visit.errors.append(str(exc)))
            yield visit
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / name
    page.screenshot(path=str(shot), full_page=True)
    return shot
