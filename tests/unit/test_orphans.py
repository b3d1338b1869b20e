"""core/orphans.py: a process that left its task's session (setsid, a double fork) comes to the
subreaper and is ended; a child of the subreaper's own session, or one it keeps, is left alone.

Each case runs in a process of its own, which becomes the subreaper: pytest's own process stays as it is."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tflab.core import orphans

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")]

SCRIPTS = str(Path(__file__).resolve().parents[2] / "scripts")

# A task as BACKEND=local starts one (its own session), whose script double-forks a sleeper that
# would write `marker` after 1.5 s, and prints the sleeper's pid; a child of the subreaper's own
# session beside it (as the lab's own tools are); and one in a session of its own that it keeps
# (as the lab keeps its reaper); and a launcher killed alone, whose script comes to the subreaper
# alive (the lab kills the launcher's group: groups given, its members are no strays).
SUBREAPER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from tflab.core import orphans
    marker, on = sys.argv[1], sys.argv[2] == "on"
    assert orphans.subreaper(on) is on
    daemon = ("import os, sys, time\\n"
              "if os.fork() == 0:\\n"
              "    os.setsid()\\n"
              "    if os.fork() == 0:\\n"
              "        time.sleep(1.5); open(sys.argv[1], 'w').write('late'); os._exit(0)\\n"
              "    os._exit(0)\\n"
              "os.wait()\\n")
    own = subprocess.Popen(["sleep", "30"])
    kept = subprocess.Popen(["sleep", "30"], start_new_session=True)
    # A launcher whose group the lab killed: its script comes here still alive, and is no stray.
    launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '5'], "
                                 "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); time.sleep(30)"],
                                start_new_session=True)
    time.sleep(1.0)
    launcher.kill(); launcher.wait()
    task = subprocess.run([sys.executable, "-c", daemon, marker], start_new_session=True)
    killed = orphans.end_orphans(frozenset([kept.pid]), frozenset([launcher.pid] if sys.argv[3] == "groups" else []))
    print(json.dumps({"killed": [c.pid for c in killed], "names": [c.name for c in killed],
                      "own": own.poll(), "kept": kept.poll(), "said": orphans.said(killed) if killed else ""}))
    own.kill(); kept.kill()
""")


def run_subreaper(tmp_path, on: bool, groups: bool = True) -> tuple[dict, Path]:
    marker = tmp_path / "written-after-the-run"
    done = subprocess.run([sys.executable, "-c", SUBREAPER, str(marker), "on" if on else "off",
                           "groups" if groups else "none"], capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONPATH": SCRIPTS})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), marker


def test_a_double_forked_sleeper_is_killed_and_writes_nothing(tmp_path):
    found, marker = run_subreaper(tmp_path, on=True)
    assert len(found["killed"]) == 1 and found["names"][0].startswith("python")
    assert found["own"] is None and found["kept"] is None  # the subreaper's own session, and what it keeps
    assert found["said"].startswith("killed 1 process the tasks had left running on their own")
    time.sleep(2)
    assert not marker.exists()
    assert not os.path.exists(f"/proc/{found['killed'][0]}")


def test_a_killed_groups_member_is_ended_but_not_named_a_stray(tmp_path):
    """The same run, the launcher's group not given: its script, alive, is named too (the filter can fail)."""
    found, _ = run_subreaper(tmp_path, on=True, groups=False)
    assert len(found["killed"]) == 2 and "sleep" in found["names"]


def test_without_the_subreaper_the_sleeper_escapes(tmp_path):
    """The case above can fail: without prctl the sleeper goes to init, out of reach, and writes."""
    found, marker = run_subreaper(tmp_path, on=False)
    assert found["killed"] == []
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.read_text() == "late"


def test_said_names_a_few_and_counts_the_rest():
    killed = [orphans.Child(100 + i, 7, 7, "S", "sleep") for i in range(7)]
    line = orphans.said(killed, most=2)
    assert line.startswith("killed 7 processes the tasks had left running on their own (setsid, a double fork): "
                           "100 (sleep), 101 (sleep) and 5 more;")


def test_the_runs_mark_finds_the_processes_whose_environment_holds_it_exactly():
    """The reaper's last resort for a lab killed with SIGKILL (engine/reaper.py kill_marked)."""
    mark = "TFLAB_CONFIG=/runs/r-7c2e41/config.json"
    marked = subprocess.Popen(["sleep", "30"], env={**os.environ, "TFLAB_CONFIG": "/runs/r-7c2e41/config.json"})
    other = subprocess.Popen(["sleep", "30"], env={**os.environ, "TFLAB_CONFIG": "/runs/r-7c2e41/config.json.x"})
    try:
        found = orphans.marked(mark)
        assert marked.pid in found and other.pid not in found and os.getpid() not in found
    finally:
        marked.kill()
        other.kill()
        marked.wait()
        other.wait()
