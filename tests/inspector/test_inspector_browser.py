"""The inspector in a real headless Chromium, served and static: the table and a run's view
render with the right counts, two runs show side by side, a reload shows a run saved since,
and Ctrl-C stops the server. Screenshots go to tests/output/inspector/ (or
``$SWEFLOW_TEST_OUTPUT/inspector``) for a person to look at.

Chromium (Debian's ``chromium``, scripts/setup.sh installs it) loads the page with
``--dump-dom`` (the DOM after the page's script ran); it is started with its background
networking off and a fresh profile, so the only traffic is to the loopback server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from inspector_runs import A, RunFolder, make_run_folder

from sweflow.inspector import page_data, write_page
from sweflow.ports import free_port

REPO = Path(__file__).resolve().parents[2]
QUIET = [  # no traffic but to the page: no updates, sync, metrics, safe browsing, prefetch
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-first-run",
    "--no-pings",
    "--metrics-recording-only",
    "--hide-scrollbars",
    "--run-all-compositor-stages-before-draw",  # a screenshot of the whole page, not a part
]


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (apt-get install -y chromium; scripts/setup.sh does)"
        print(f"inspector browser tests: skipped: {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """``browser(url, *flags) -> stdout``: one headless Chromium run on a fresh profile."""
    binary = chromium_path()

    def once(url: str, *flags: str) -> str:
        profile = tmp_path_factory.mktemp("profile")
        argv = [binary, *QUIET, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
        done = subprocess.run(
            [*argv, *flags, url], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def run(url: str, *flags: str) -> str:
        # headless Chromium with a virtual-time budget now and then hangs (once in a
        # fresh-clone .ci/run on 2026-12-05; 18 s on the rerun): one hang is retried on a fresh
        # profile, a second fails the test
        try:
            return once(url, *flags)
        except subprocess.TimeoutExpired:
            print(f"chromium hung on {url} for 120 s: retried once on a fresh profile")
            return once(url, *flags)

    return run


@pytest.fixture(scope="module")
def shots() -> Path:
    root = Path(os.environ.get("SWEFLOW_TEST_OUTPUT") or REPO / "tests" / "output")
    folder = root / "inspector"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"inspector screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> RunFolder:
    return make_run_folder(tmp_path_factory.mktemp("runs"))


def dom(browser, url: str) -> str:
    return browser(url, "--dump-dom")


def screenshot(browser, url: str, path: Path, height: int = 1000) -> None:
    browser(url, f"--screenshot={path}", f"--window-size=1400,{height}")
    assert path.stat().st_size > 10_000, f"{path}: an empty screenshot"


def rows(html: str) -> list[str]:
    return re.findall(r'<tr class="run-row" data-id="(r\d+)"', html)


def check_views(browser, url: str, data: dict, every_run: bool = True) -> None:
    """The table lists every run; a run shows its steps, grading and patch (every run's, or
    the refused one's); two runs of a task show side by side."""
    table = dom(browser, url)
    assert 'data-view="table"' in table
    assert len(rows(table)) == len(data["runs"])
    assert f"Showing {len(data['runs'])} of {len(data['runs'])} runs" in table
    shown = data["runs"] if every_run else [r for r in data["runs"] if r["verdict"] == "refused"]
    for run in shown:
        page = dom(browser, f"{url}#run/{run['id']}")
        assert 'data-view="run"' in page
        assert page.count('<div class="step" ') == run["steps"], run["id"]
        tests = run["grading"]["tests"]
        for kind in tests:
            listed = re.search(rf'<ul class="test-list" data-kind="{kind}">(.*?)</ul>', page, re.S)
            assert listed.group(1).count('class="pass"') == len(tests[kind]["passed"])
            assert listed.group(1).count('class="fail"') == len(tests[kind]["failed"])
        if run["verdict"] == "refused":
            assert "Refused by the tamper guard (touches_tests)" in page
        assert ('class="diff final-patch"' in page) == bool(run["patch"])
    first, second = (r["id"] for r in data["runs"] if r["task"] == A and r["source"] == "collect")
    both = dom(browser, f"{url}#compare/{first}/{second}")
    assert both.count('class="compare-col"') == 2
    steps = {r["id"]: r["steps"] for r in data["runs"]}
    assert both.count('<div class="step" ') == steps[first] + steps[second]


def check_sorting_filtering_and_folding(browser, url: str, data: dict) -> None:
    """The table's state from a link (?verdict=, ?q=, ?sort=&dir=) and a long observation
    folded after its first lines."""
    runs = data["runs"]
    resolved = rows(dom(browser, f"{url}?verdict=resolved"))
    assert sorted(resolved) == sorted(r["id"] for r in runs if r["verdict"] == "resolved")
    rl = rows(dom(browser, f"{url}?q=policy@0"))
    assert sorted(rl) == sorted(r["id"] for r in runs if r["model"] == "policy@0")
    by_tokens = rows(dom(browser, f"{url}?sort=tokens&dir=-1"))
    tokens = {r["id"]: r["tokens"] for r in runs}
    assert [tokens[i] for i in by_tokens] == sorted(tokens.values(), reverse=True)
    idle = next(r for r in runs if r["exit"] == "step_limit")  # it printed 40 lines of README
    long = [
        a for s in idle["trace"] for a in s["actions"] if len(a["observation"].split("\n")) > 24
    ]
    page = dom(browser, f"{url}#run/{idle['id']}")
    assert page.count('<details class="fold">') == len(long) > 0
    assert re.search(r"<summary>show \d+ more lines</summary>", page)


def test_the_static_page_in_chromium(browser, runs: RunFolder, shots: Path, tmp_path) -> None:
    page = tmp_path / "inspector.html"
    write_page(runs.root, page)
    data = page_data(runs.root)
    url = page.as_uri()
    check_views(browser, url, data)
    resolved = next(r["id"] for r in data["runs"] if r["verdict"] == "resolved")
    refused = next(r["id"] for r in data["runs"] if r["verdict"] == "refused")
    first, second = (r["id"] for r in data["runs"] if r["task"] == A and r["source"] == "collect")
    check_sorting_filtering_and_folding(browser, url, data)
    screenshot(browser, url, shots / "static-table.png", 700)
    screenshot(browser, f"{url}#run/{resolved}", shots / "static-run.png", 2400)
    screenshot(browser, f"{url}#run/{refused}", shots / "static-refused.png", 1300)
    screenshot(browser, f"{url}#compare/{first}/{second}", shots / "static-compare.png", 1400)


def test_the_served_page_in_chromium_reloads_and_stops_on_ctrl_c(
    browser, runs: RunFolder, shots: Path
) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "sweflow.cli", "inspect", str(runs.root), "--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        url = f"http://127.0.0.1:{port}/"
        assert line.startswith(f"inspector: {url}"), line
        data = page_data(runs.root)
        check_views(browser, url, data, every_run=False)
        screenshot(browser, url, shots / "served-table.png", 700)
        saved = runs.infer / "trajectories" / A / "run-0.json"  # a run saved meanwhile
        saved.parent.mkdir()
        shutil.copy(runs.collect / "trajectories" / A / "run-0.json", saved)
        try:
            assert len(rows(dom(browser, url))) == len(data["runs"]) + 1
        finally:
            saved.unlink()
            saved.parent.rmdir()
        server.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = server.communicate(timeout=10)
        assert server.returncode == 0, out
        assert "inspector stopped" in out
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
