"""`--html FILE` on simulate, sweep, plan and validate (issue 25), opened in a real browser:
headless Chromium (Debian's package; `.ci/run` installs it) loads each page from disk and
the test checks that it renders with no console error, no exception and no failed load, that it
asks for nothing but itself and its inline data (it opens offline), that its charts decode,
and that every number it shows is the number of the command's `--json` output (the same run).
A screenshot of each page is saved. Skips, saying why, only where chromium is not installed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from browser import binary, load
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(binary() is None,
                                reason="Debian's chromium package is not installed (no chromium on PATH); "
                                       ".ci/run installs it with apt-get install chromium")

SMALL = ["-m", "llama-3.1-8b", "--input-len", "512", "--output-len", "64", "--seed", "1"]
COMMANDS = {
    "simulate": ["simulate", *SMALL, "-H", "h100-sxm", "-n", "300", "-r", "8", "--replicas", "2",
                 "--range-ratio", "0.5"],
    "sweep": ["sweep", *SMALL, "-H", "h100-sxm", "-n", "150", "--rates", "2,8,16,32", "--slo", "chat",
              "--serial"],
    "plan": ["plan", *SMALL, "-r", "10", "--hardware", "h100-sxm,a100-sxm-80gb", "--tp", "1,2", "-n", "150",
             "--slo", "chat", "--serial"],
    "validate": ["validate", str(ROOT / "notebooks" / "data" / "dev_static.csv"), "--hardware-filter", "l40s"],
}


def lookup(data, path: str):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.fixture(scope="module", params=list(COMMANDS))
def page(request, tmp_path_factory):
    """(command, its --json output, the browser's report on its --html page)."""
    from simulator.cli.commands import main

    name = request.param
    d = tmp_path_factory.mktemp(f"html-{name}")
    path = d / f"{name}.html"
    r = CliRunner().invoke(main, [*COMMANDS[name], "--json", "-q", "--html", str(path)])
    assert r.exit_code == 0, r.output
    report = load(path)
    shots = Path(os.environ.get("LLMSIM_SCREENSHOT_DIR", d))
    (shots / f"{name}.png").write_bytes(report.screenshot)
    return name, json.loads(r.output), report, path


def test_renders_without_errors(page):
    name, _, rep, path = page
    assert rep.errors == [], rep.errors
    assert rep.images_ok, f"{name}: a chart did not decode"
    assert rep.title and rep.screenshot.startswith(b"\x89PNG") and len(rep.screenshot) > 20_000


def test_opens_offline(page):
    """Nothing but the page itself and data: URIs: no CDN, no second file."""
    _, _, rep, path = page
    others = [u[:80] for u in rep.requests if not u.startswith("data:") and u != path.resolve().as_uri()]
    assert others == []


def test_numbers_shown_are_the_json(page):
    """Each [data-key] shows the value at that path of the --json output: data-value exactly,
    the text to the 4 significant digits it is shown with."""
    name, data, rep, _ = page
    assert len(rep.numbers) >= {"simulate": 35, "sweep": 30, "plan": 20, "validate": 40}[name]
    for key, value, shown in rep.numbers:
        want = lookup(data, key)
        assert float(value) == want, (key, value, want)
        got = float(shown.replace(",", ""))
        if isinstance(want, int) and not isinstance(want, bool):
            assert got == want, (key, shown, want)
        else:
            assert math.isclose(got, want, rel_tol=5e-4, abs_tol=0.0), (key, shown, want)


def test_what_each_page_must_show(page):
    name, data, rep, _ = page
    keys = {k for k, _, _ in rep.numbers}
    must = {
        "simulate": {"p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "request_throughput",
                     "output_throughput", "mfu_mean"},
        "sweep": {"curves.0.knee.rate", "curves.0.saturation_lower_bound", "points.0.p99_ttft_ms"},
        "plan": {"candidates.0.slo_capacity", "candidates.0.cost_per_hour_usd", "candidates.0.replicas"},
        "validate": {"median_ape", "p90_ape", "points.0.error_pct"},
    }[name]
    assert must <= keys, must - keys
    if name == "plan":  # every candidate is listed
        assert {f"candidates.{i}.replicas" for i in range(len(data["candidates"]))} <= keys


def test_the_checks_can_fail(tmp_path):
    """A page with a broken script, a console error and a missing image is reported."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><title>bad</title></head><body><img src="missing.png">'
                   '<script>console.error("boom"); notDefined();</script></body></html>')
    rep = load(bad)
    text = " ".join(rep.errors)
    assert "boom" in text and "notDefined" in text and "ERR_FILE_NOT_FOUND" in text
    assert not rep.images_ok


def test_binding_slo_is_shown_when_the_result_has_it(tmp_path):
    """Plan candidates and sweep rows that name their binding SLO (a field whose name starts
    with 'binding') show it in a column of its own; without the field there is no column."""
    from simulator.cli import html
    from simulator.cli.commands import main

    r = CliRunner().invoke(main, [*COMMANDS["plan"], "--json", "-q"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert "binding SLO" not in html.plan_page(plan)
    for i, c in enumerate(plan["candidates"]):
        c["binding_slo"] = "ttft" if i % 2 else "tpot"
    page = html.plan_page(plan)
    assert "<th>binding SLO</th>" in page and page.count("<td>ttft</td>") == len(plan["candidates"]) // 2
