"""Every built-in spec on the oldest supported release of each library (opt-in: ATTACKAUDIT_LONG_AUDITS=1).

Each release runs in its audit overlay (``audit_env.prepare_env``); every spec of its catalogue
attacks two digits through the harness's own job path (``job.attack_with_tracker``, steps ×0.01),
and the test lists, per release, what is ``unsupported`` (our limitation, with the reason) and
what crashes. A crash that is our call convention (an unexpected keyword, a rejected ε array)
fails the test: those must be bridged or reported as unsupported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LONG = pytest.mark.skipif(os.environ.get("ATTACKAUDIT_LONG_AUDITS") != "1",
                          reason="installs old releases (the index or a filled wheel cache): set ATTACKAUDIT_LONG_AUDITS=1")

#: the oldest release of each library the adapters support beside torch 2.14 / numpy 2
#: (AttackBench's pins: ART 1.14.0, foolbox 3.3.3, torchattacks 3.4.0; older where they install)
OLDEST = [("adv-lib", "0.2.2", "adv_lib"), ("foolbox", "3.2.1", "foolbox"),
          ("adversarial-robustness-toolbox", "1.14.0", "art"), ("torchattacks", "3.2.6", "torchattacks"),
          ("cleverhans", "3.1.0", "cleverhans")]

_RUN_ALL = r"""
import json, sys, torch
from attackaudit.adapters import load_library
from attackaudit.sources.subset import load_subset
from attackaudit.run.job import attack_with_tracker
from attackaudit.sources.zoo import load_model
sub, model = load_subset("digits", 2, 0), load_model("digits-cnn")
out = {}
for spec in load_library(sys.argv[1]).specs:
    _, _, error = attack_with_tracker(spec.scaled(0.01), model, sub.inputs, sub.labels, budget=200)
    out[spec.key] = error
print("RESULT " + json.dumps(out))
"""

#: what a crash of our own call convention looks like
OUR_CALL = ("unexpected keyword argument", "is not supported to use with norm", "has to be either of type int or float")


@LONG
@pytest.mark.parametrize("dist, version, library", OLDEST, ids=[f"{d}=={v}" for d, v, _ in OLDEST])
def test_every_spec_on_the_oldest_release(dist, version, library, capsys, monkeypatch):
    from attackaudit.audit.env import AuditEnvError, cache_root, prepare_env

    offline = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "index", "versions", dist],
                             capture_output=True, text=True).returncode != 0
    if offline:  # a cached overlay is reused as it is; otherwise only the local wheel directory is tried
        monkeypatch.setenv("ATTACKAUDIT_PIP_ARGS", f"--no-index --find-links {cache_root() / 'wheels'}")
    try:
        env = prepare_env(dist, version, library)
    except AuditEnvError as exc:
        if offline:
            pytest.skip(f"offline, and {dist}=={version} or a requirement is not in the wheel directory: {exc}")
        raise
    proc = subprocess.run([env.python, "-c", _RUN_ALL, library], capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stderr[-2000:]
    errors = json.loads(line.removeprefix("RESULT "))
    assert errors, f"{dist} {version}: empty catalogue"
    unsupported = {k: e for k, e in errors.items() if e.startswith("unsupported: ")}
    crashes = {k: e for k, e in errors.items() if e and k not in unsupported}
    with capsys.disabled():
        print(f"\n{dist} {version}: {len(errors)} specs, {len(unsupported)} unsupported, {len(crashes)} crash")
        for k, e in {**unsupported, **crashes}.items():
            print(f"  {k}: {e}")
    ours = {k: e for k, e in crashes.items() if any(sig in e for sig in OUR_CALL)}
    assert not ours, f"crashes of our own call convention: {ours}"
