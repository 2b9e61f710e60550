"""The generated report.html in a real headless Chromium (Debian's ``chromium``): every plot
renders, no console message at all (script errors, Content-Security-Policy violations, failed
loads all log one), the tables are there and sort on click, the first screen reads whole at
1280×800 and 1920×1080 (nothing clipped or off the edge, no scroll box inside it, the decided
answers first and whole on the first screen, also for a run of the demo's 46 families and norms;
each ⚑ on the row it counts, counting defects only; weak picks marked), and a screenshot is saved
as a test artefact (test-artifacts/report.png, and test-artifacts/first-screen-RUN-WxH.png at both
sizes)."""
from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attackaudit.fidelity.synthetic import job_rows, table
from attackaudit.reports import write_report
from attackaudit.results.store import write_job, write_manifest
from demo_shaped_run import write_demo_shaped_run
from test_report_first_screen import flag_counts, reported_run

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT = ROOT / "test-artifacts" / "report.png"
HOSTILE = "<script>alert(1)</script>"


def _chromium() -> str | None:
    for candidate in (os.environ.get("ATTACKAUDIT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (/usr/bin/chromium); "
                                                         "`make install` sets it up via .ci/chromium.sh")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--enable-logging=stderr", "--v=0"]

# Runs on load; writes what it finds into <pre id="aa-check"> for --dump-dom.
CHECK = """window.addEventListener('load',function(){var r={};
var svgs=document.querySelectorAll('svg');r.svgs=svgs.length;r.svgEmpty=0;
svgs.forEach(function(s){var b=s.getBoundingClientRect();if(!(b.width>50&&b.height>50)){r.svgEmpty++;}});
var imgs=document.images;r.imgs=imgs.length;r.imgBroken=0;
for(var i=0;i<imgs.length;i++){if(!(imgs[i].complete&&imgs[i].naturalWidth>0)){r.imgBroken++;}}
r.tables=document.querySelectorAll('table').length;
r.rows=document.querySelectorAll('table tbody tr').length;
r.sections=Array.prototype.map.call(document.querySelectorAll('main > section'),function(s){return s.id;});
var t=document.querySelector('#leaderboard table');var ths=t.tHead.rows[0].cells,col=-1;
for(var j=0;j<ths.length;j++){if(ths[j].textContent.indexOf('global')===0){col=j;}}
function vals(){return Array.prototype.map.call(t.tBodies[0].rows,function(row){
return parseFloat(row.cells[col].getAttribute('data-sort'));});}
ths[col].click();r.ascending=vals();ths[col].click();r.descending=vals();
r.alerted=!!window.__alerted;
var pre=document.createElement('pre');pre.id='aa-check';pre.textContent=JSON.stringify(r);
document.body.appendChild(pre);});
window.alert=function(){window.__alerted=true;};"""


def _rows(model: str, norm: str, n: int = 10) -> list:
    rng = np.random.default_rng(len(model))
    base = rng.uniform(0.05, 0.3, n)
    base[0] = 0.0
    evil = f"evil{HOSTILE}/a\"b&c"
    return [
        job_rows(model, "adv_lib/apgd", norm, base, family="apgd", library_version="0.2.8"),
        job_rows(model, "foolbox/LinfPGD", norm, base * 1.1, family="apgd", library_version="3.3.4"),
        job_rows(model, evil, norm, np.where(base > 0.2, np.inf, base * 1.5), family="apgd",
                 library_version='1"&<i>', status=["crash"] + ["ok"] * (n - 1),
                 error=[f"ValueError: {HOSTILE} & 'x'"] + [""] * (n - 1)),
    ]


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("browser-run")
    rows = table(*_rows("m-cnn", "linf"), *_rows("m-mlp", "linf"))
    for i, (_, g) in enumerate(rows.groupby("job_id", sort=True)):
        write_job(run, f"job{i:03d}", g)
    write_manifest(run, {"name": f"browser {HOSTILE}", "seed": 0, "library_versions": {"adv_lib": "0.2.8"}})
    return write_report([run], formats=("html",))["report.html"]


def _chrome(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"chromium did not finish in {timeout} s: {(exc.stderr or b'')[-2000:]!r}")


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _probe(page: Path, check: str, tmp_path: Path, window: str = "1280,2400") -> dict:
    """Load ``page`` with ``check`` (a script that writes JSON into <pre id="aa-check">) let in by
    its hash, as the page lets in its own; the parsed JSON. No console message may appear."""
    source = page.read_text()
    digest = base64.b64encode(hashlib.sha256(check.encode()).digest()).decode()
    probe = source.replace("script-src &#x27;sha256-", f"script-src &#x27;sha256-{digest}&#x27; &#x27;sha256-", 1)
    assert probe != source
    probe = probe.replace("</main>", f"</main><script>{check}</script>", 1)
    probe_path = tmp_path / f"probe-{page.stem}.html"
    probe_path.write_text(probe)
    done = _chrome([f"--window-size={window}", "--hide-scrollbars", "--dump-dom", probe_path.as_uri()],
                   tmp_path / f"profile-{page.stem}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _console(done.stderr), _console(done.stderr)
    found = re.search(r'<pre id="aa-check">(.*?)</pre>', done.stdout, re.S)
    assert found, "the check script did not run: " + done.stdout[-500:]
    return json.loads(html.unescape(found.group(1)))


def test_report_renders_in_chromium_without_console_errors(page: Path, tmp_path: Path):
    r = _probe(page, CHECK, tmp_path)
    # 2 robustness plots; the apgd answer's evidence: its trust set's curves and the scatter behind it
    assert r["svgs"] == 4 and r["svgEmpty"] == 0
    assert r["imgBroken"] == 0
    assert r["sections"][:7] == ["answer", "summary", "evidence", "leaderboard", "curves", "alignment", "flags"]
    assert r["tables"] >= 6 and r["rows"] >= 15
    assert r["ascending"] == sorted(r["ascending"]) and r["descending"] == sorted(r["descending"], reverse=True)
    assert len(set(r["ascending"])) > 1
    assert r["alerted"] is False


# Measures the first screen as laid out at 1400×900: where the answer is, how many answer rows,
# whether every in-page link ("#id") has its target, and what the evidence links point at.
FIRST_SCREEN = """window.addEventListener('load',function(){var r={};
var a=document.getElementById('answer');var b=a.getBoundingClientRect();
r.scrollY=window.scrollY;r.innerHeight=window.innerHeight;r.innerWidth=window.innerWidth;
r.answerTop=b.top;r.answerBottom=b.bottom;
r.rows=Array.prototype.map.call(a.querySelectorAll('tbody tr, li'),function(tr){var x=tr.getBoundingClientRect();
return [tr.textContent.trim().slice(0,120),x.bottom];});
r.links=0;r.dangling=[];r.targets={};
document.querySelectorAll('a[href^="#"]').forEach(function(l){var id=l.getAttribute('href').slice(1);r.links++;
var t=document.getElementById(id);if(!t){r.dangling.push(id);}else{r.targets[t.tagName+'.'+(t.className||'')]=1;}});
r.evidence=Array.prototype.map.call(a.querySelectorAll('a[href^="#"]'),function(l){
var t=document.getElementById(l.getAttribute('href').slice(1));if(!t){return null;}
return [t.querySelectorAll('svg').length,t.querySelectorAll('li').length,t.textContent.length];});
var pre=document.createElement('pre');pre.id='aa-check';pre.textContent=JSON.stringify(r);
document.body.appendChild(pre);});"""


def test_answer_on_the_first_screen_and_every_evidence_link_resolves(page: Path, tmp_path: Path):
    r = _probe(page, FIRST_SCREEN, tmp_path, window="1400,900")
    # a 1400×900 window; in --dump-dom mode Chromium keeps room for its own bars (a viewport about
    # 757 px high), stricter than the 900 px of the --screenshot viewport
    assert r["innerWidth"] == 1400 and 600 < r["innerHeight"] <= 900 and r["scrollY"] == 0
    # the answer sits inside the first screen, every row of it visible without scrolling
    assert 0 <= r["answerTop"] < r["answerBottom"] <= min(900, r["innerHeight"]), r
    rows = [text for text, bottom in r["rows"]]
    assert len(rows) == 1 and rows[0].startswith("apgd · linf") and all(b <= 900 for _, b in r["rows"])
    # every in-page link lands somewhere; the answer's links land on evidence holding plots and flags
    assert r["links"] >= 15 and r["dangling"] == [], r["dangling"]
    assert r["evidence"] and all(e is not None for e in r["evidence"])
    svgs, items, size = r["evidence"][0]
    assert svgs == 2 and size > 300                        # trust-set curves + the scatter behind the verdict
    flagged = [e for e in r["evidence"][1:] if e[1] > 0]
    assert flagged, r["evidence"]                          # the ⚑ badge lands on the flagged list
    assert {"DIV.rows", "DIV.ev"} <= set(r["targets"]), r["targets"]


@pytest.fixture(scope="module")
def screen_run(tmp_path_factory) -> Path:
    """test_report_first_screen's run (every case of the first screen), reported."""
    return reported_run(tmp_path_factory, "browser-first-screen")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    """A run shaped like the demo (the catalogue's 46 families and norms, its long names), reported."""
    return reported_run(tmp_path_factory, "browser-demo-shaped", write_demo_shaped_run)


# Measures the answer as laid out: every cell, badge and line of text of the answer tables must lie
# inside its cell and the viewport (a clipped or cut name, a badge cut by its cell or a column off
# the right edge each add to ``bad``); per table (decided, open) its box; per row its table, texts,
# box, and whether its ⚑ badges lie on its row (the implementation's) and in the family's header
# cell (the family's).
SCREEN = """window.addEventListener('load',function(){var r={bad:[],rows:[],tables:[]};
var vw=document.documentElement.clientWidth;r.vw=vw;r.innerWidth=window.innerWidth;r.innerHeight=window.innerHeight;
r.scrollY=window.scrollY;var grid=document.querySelector('#answer .answer-grid'),g=grid.getBoundingClientRect();
r.grid=[g.left,g.top,g.right,g.bottom];r.gridOverflow=getComputedStyle(grid).overflowY;
function box(e){var b=e.getBoundingClientRect();return [b.left,b.top,b.right,b.bottom];}
function inside(a,b){return a.left>=b.left-0.5&&a.right<=b.right+0.5&&a.top>=b.top-0.5&&a.bottom<=b.bottom+0.5;}
function text(e){return e.textContent.replace(/\s+/g,' ').trim();}
grid.querySelectorAll('table.answer').forEach(function(t){r.tables.push({cls:t.className,box:box(t)});});
grid.querySelectorAll('th,td,caption').forEach(function(c){if(!c.getClientRects().length){return;}
var cb=c.getBoundingClientRect();
if(c.scrollWidth>c.clientWidth+1||c.scrollHeight>c.clientHeight+1){r.bad.push(['cell overflows',text(c)]);}
if(cb.right>vw+0.5||cb.left<-0.5){r.bad.push(['cell off the edge',text(c)]);}
var w=document.createTreeWalker(c,NodeFilter.SHOW_TEXT),n;while((n=w.nextNode())){if(!n.textContent.trim()){continue;}
var range=document.createRange();range.selectNodeContents(n);
Array.prototype.forEach.call(range.getClientRects(),function(x){if(x.width>0&&(!inside(x,cb)||x.right>vw+0.5)){
r.bad.push(['text cut',n.textContent.trim()]);}});}
c.querySelectorAll('.v,.badge,.weak').forEach(function(e){if(e.scrollWidth>e.clientWidth+1||!inside(e.getBoundingClientRect(),cb)){
r.bad.push(['badge cut',text(e)]);}});});
grid.querySelectorAll('table.answer tbody').forEach(function(tb){var fam=tb.querySelector('th.fam'),fb=fam.querySelector('.badge');
var cls=tb.parentNode.className;
Array.prototype.forEach.call(tb.rows,function(tr,i){var own=tr.querySelector('td.own .badge'),rb=tr.getBoundingClientRect();
var pick=tr.querySelector('td.pick a');
r.rows.push({table:cls,first:i===0,box:box(tr),family:text(fam),famBadge:fb?text(fb):'',
famBadgeInHeader:fb?inside(fb.getBoundingClientRect(),fam.getBoundingClientRect()):null,
verdict:text(tb.querySelector('td.ver')),pick:text(pick),title:pick.getAttribute('title'),
xi:text(tr.querySelector('td.num')),note:text(tr.querySelector('td.nb')),own:own?text(own):'',
ownOnRow:own?inside(own.getBoundingClientRect(),rb):null});});});
var pre=document.createElement('pre');pre.id='aa-check';pre.textContent=JSON.stringify(r);
document.body.appendChild(pre);});"""


def _screen(run: Path, tmp_path: Path, width: int, height: int) -> dict:
    """The first screen of ``run``'s report.html laid out at ``width`` × ``height``, with the checks
    every run must pass: nothing clipped, cut or off the edge; no scroll box inside the answer (a
    row cut by its bottom edge); the decided answers first, every row of them whole inside the first
    screen; each ⚑ on the row it counts, counting defects only; a screenshot saved."""
    r = _probe(run / "report.html", SCREEN, tmp_path, window=f"{width},{height}")
    assert r["innerWidth"] == width and r["vw"] <= width and r["scrollY"] == 0
    assert r["bad"] == [], r["bad"]
    left, top, right, _ = r["grid"]
    assert 0 <= left and right <= r["vw"] and 0 < top < r["innerHeight"], r
    assert r["gridOverflow"] == "visible", r["gridOverflow"]
    assert all(t["box"][2] <= r["vw"] for t in r["tables"]), r["tables"]
    decided = [row for row in r["rows"] if "decided" in row["table"]]
    open_ = [row for row in r["rows"] if "open" in row["table"]]
    assert r["rows"] == decided + open_                              # decided first
    assert {row["verdict"] for row in decided} <= {"clear", "tied", "only"}
    assert {row["verdict"] for row in open_} <= {"inconclusive", "none"}
    assert all(0 <= row["box"][1] and row["box"][3] <= r["innerHeight"] for row in decided), \
        [row for row in decided if row["box"][3] > r["innerHeight"]][:3]
    own, family = flag_counts(run)
    for row in r["rows"]:
        fam, norm = row["family"].split(" ⚑ ")[0].split(" · ")
        if row["pick"] == "none trusted":
            assert row["verdict"] == "none" and row["xi"] == "" and row["own"] == "", row
        else:
            name, _, version = row["title"].rpartition(" ")
            n = own.get((name, version, norm), 0)
            assert row["own"] == (f"⚑ {n}" if n else "") and row["ownOnRow"] in ((True,) if n else (None,)), row
        k, total = family[(fam, norm)]
        assert row["famBadge"] == (f"⚑ {k} of {total}" if k else "") and row["famBadgeInHeader"] in (
            (True,) if k else (None,)), row
    shot = ARTIFACT.parent / f"first-screen-{run.name.rstrip('0123456789')}-{width}x{height}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    done = _chrome([f"--screenshot={shot}", f"--window-size={width},{height}", "--hide-scrollbars",
                    (run / "report.html").as_uri()], tmp_path / "profile-screen-shot")
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return r


@pytest.mark.parametrize("width,height", [(1280, 800), (1920, 1080)])
def test_first_screen_reads_whole(screen_run: Path, tmp_path: Path, width: int, height: int):
    r = _screen(screen_run, tmp_path, width, height)
    assert len(r["rows"]) == 11
    # a weak pick is marked on its row; the best of its norm is named under the table
    weak = [row for row in r["rows"] if row["note"] == "weak"]
    assert sorted(row["family"].split(" ⚑")[0] for row in weak) == ["ead · l2", "fab · linf"]


# the wide screen shows more: the narrow one is the check, the wide one its second copy
@pytest.mark.parametrize("width,height", [(1280, 800), pytest.param(1920, 1080, marks=pytest.mark.slow)])
def test_a_demo_sized_first_screen_shows_every_decided_answer(demo_run: Path, tmp_path: Path, width: int,
                                                              height: int):
    r = _screen(demo_run, tmp_path, width, height)
    families = {row["family"].split(" ⚑")[0] for row in r["rows"]}
    assert len(families) == 46                                       # the catalogue's families and norms
    decided = [row for row in r["rows"] if "decided" in row["table"]]
    assert len({row["family"] for row in decided}) >= 20, len(decided)
    # one line per row where the names allow it: no row of the decided answer wraps
    heights = [row["box"][3] - row["box"][1] for row in decided]
    assert max(heights) < 1.6 * min(heights), heights
    # side by side where the window is wide, one under the other where it is not
    (d, o) = [t["box"] for t in r["tables"]]
    assert (o[0] > d[2]) if width >= 1700 else (o[1] >= d[3] - 1), r["tables"]


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory) -> Path:
    import argparse

    from attackaudit.cli import report as command

    root = tmp_path_factory.mktemp("browser-compare")
    runs = []
    for name, scale, crash in (("a", 1.0, False), ("b", 1.6, True)):
        rows = []
        for model in ("m-cnn", "m-mlp"):
            base = np.random.default_rng(len(model)).uniform(0.05, 0.3, 12)
            rows += [job_rows(model, "adv_lib/apgd", "linf", base, family="apgd", library_version="0.2.8"),
                     job_rows(model, "foolbox/LinfPGD", "linf", base * scale, family="apgd",
                              library_version=f"3.{3 + (name == 'b')}.4"),
                     job_rows(model, f"x{HOSTILE}/fmn", "linf", base * 1.2, family="fmn", library_version="1",
                              status="crash" if crash else "ok", error=f"E: {HOSTILE}" if crash else "")]
        run = root / name
        for i, (_, g) in enumerate(table(*rows).groupby("job_id", sort=True)):
            write_job(run, f"job{i:03d}", g)
        write_manifest(run, {"name": name, "seed": 0})
        runs.append(run)
    parser = argparse.ArgumentParser()
    command.add_compare_arguments(parser)
    command.compare_main(parser.parse_args([str(runs[0]), str(runs[1])]))
    return runs[1] / "compare.html"


def test_compare_page_opens_on_what_changed(compare_page: Path, tmp_path: Path):
    r = _probe(compare_page, FIRST_SCREEN, tmp_path, window="1400,900")
    assert 0 <= r["answerTop"] < r["answerBottom"] <= min(900, r["innerHeight"]), r
    text = " ".join(t for t, _ in r["rows"])
    assert "foolbox/LinfPGD [linf]" in text and "regressed" not in text.split("foolbox/LinfPGD")[0]
    crashed = [t for t, _ in r["rows"] if "/fmn" in t]                           # could not run: crash in B
    assert len(crashed) == 1 and "crash in B" in crashed[0], r["rows"]
    assert r["dangling"] == [] and r["evidence"] and all(e is not None for e in r["evidence"])
    assert r["evidence"][0][0] == 1                        # the regression's per-image scatter, run A against B


def test_report_screenshot(page: Path, tmp_path: Path):
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.unlink(missing_ok=True)
    done = _chrome([f"--screenshot={ARTIFACT}", "--window-size=1280,2400", "--hide-scrollbars", page.as_uri()],
                   tmp_path / "profile-shot")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _console(done.stderr), _console(done.stderr)
    data = ARTIFACT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000
