"""What a newcomer's fresh machine meets first: `make test` with or without arm64 emulation
(scripts/enable-arm64-emulation.sh and labtest/arm64.py decide, tested here with stand-ins for the
machine: uid, kernel, apt-get and binfmt_misc), and `make report` refusing a broken run before it
builds .venv."""

from __future__ import annotations

import subprocess

import pytest
from labtest import arm64
from labtest.cli import REPO, lab_env
from labtest.fakes import FakeEngine

SCRIPT = REPO / "scripts" / "enable-arm64-emulation.sh"
ENABLED = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\noffset 0\n"
WHY = "this x86_64 machine cannot run arm64 containers (no qemu-aarch64 binfmt handler with the F flag)"


@pytest.mark.parametrize("ci", [False, True])
@pytest.mark.parametrize("opted_out", [False, True])
@pytest.mark.parametrize("unavailable", [None, WHY])
def test_the_arm64_tests_run_skip_or_fail_as_the_machine_and_ci_say(ci, opted_out, unavailable):
    asked = []

    def probe():
        asked.append(True)
        return unavailable

    decided, why = arm64.verdict(ci, opted_out, probe)
    if opted_out:  # a person's choice, anywhere; the engine is not asked
        assert (decided, asked) == (arm64.SKIP, []) and why.startswith("TFLAB_SKIP_ARM64=1")
    elif unavailable is None:
        assert (decided, why) == (arm64.RUN, "")
    elif ci:  # CI must test the arm64 image: a missing emulation there is an error, never a skip
        assert decided == arm64.FAIL and WHY in why and "enable-arm64-emulation.sh" in why
    else:
        assert decided == arm64.SKIP and "\n" not in why
        assert why == f"arm64 image not tested: {WHY}; to include it, run scripts/enable-arm64-emulation.sh as " \
                      "root (make test does so itself when run as root)"


class Machine:
    """Stand-ins on PATH for id, uname, apt-get and mount, and a binfmt_misc folder of files."""

    def __init__(self, tmp_path, uid: int = 0, system: str = "Linux", handler: str | None = None,
                 apt_works: bool = False):
        self.bin, self.binfmt, self.calls = tmp_path / "bin", tmp_path / "binfmt_misc", tmp_path / "calls"
        self.bin.mkdir()
        self.binfmt.mkdir()
        self.calls.touch()
        if handler is not None:
            (self.binfmt / "qemu-aarch64").write_text(handler)
        self.conf = tmp_path / "qemu-aarch64.conf"  # absent: qemu-user-static is not installed
        fakes = {"id": f'[ "$1" = -u ] && echo {uid} || exec /usr/bin/id "$@"',
                 "uname": f'case "$1" in -s) echo {system};; -m) echo x86_64;; *) exec /bin/uname "$@";; esac',
                 "apt-get": f'echo "apt-get $*" >>{self.calls}; echo "E: Unable to locate package" >&2; '
                            f'exit {0 if apt_works else 100}',
                 "mount": f'echo "mount $*" >>{self.calls}; exit 32'}
        for name, body in fakes.items():
            (self.bin / name).write_text(f"#!/bin/bash\n{body}\n")
            (self.bin / name).chmod(0o755)

    def run(self, *arguments: str, **env: str) -> subprocess.CompletedProcess:
        environment = {"PATH": f"{self.bin}:/usr/bin:/bin", "TFLAB_BINFMT_MISC": str(self.binfmt),
                       "TFLAB_BINFMT_CONF": str(self.conf), **env}
        return subprocess.run(["bash", str(SCRIPT), *arguments], env=environment, capture_output=True, text=True,
                              timeout=30)

    def apt_calls(self) -> list[str]:
        return [line for line in self.calls.read_text().splitlines() if line.startswith("apt-get")]


@pytest.mark.parametrize("uid, system, handler, env", [
    (1000, "Linux", None, {}),  # not root: the tests say how to include them instead
    (0, "Linux", ENABLED, {}),  # on already
    (0, "Darwin", None, {}),  # Docker Desktop emulates in its VM
    (0, "Linux", None, {"TFLAB_SKIP_ARM64": "1"}),  # opted out: nothing installed for tests that will not run
], ids=["not-root", "on-already", "not-linux", "opted-out"])
def test_make_test_leaves_the_machine_alone_unless_root_on_linux_without_emulation(uid, system, handler, env,
                                                                                   tmp_path):
    machine = Machine(tmp_path, uid=uid, system=system, handler=handler)
    result = machine.run("--if-needed", **env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert machine.calls.read_text() == ""


def test_make_test_as_root_tries_to_enable_emulation_and_goes_on_with_one_line_if_it_cannot(tmp_path):
    machine = Machine(tmp_path, uid=0, apt_works=False)
    result = machine.run("--if-needed")
    assert result.returncode == 0  # make test goes on: the arm64 tests skip (or, under CI, fail) saying why
    assert result.stdout == "tflab: installing qemu-user-static (apt-get install qemu-user-static)\n"
    assert result.stderr == ("tflab: could not enable arm64 emulation (could not install qemu-user-static with "
                             "apt-get): the arm64 tests will be skipped\n")
    assert machine.apt_calls() == ["apt-get update -qq"]


def test_the_script_is_quiet_and_idempotent_where_emulation_is_on(tmp_path):
    machine = Machine(tmp_path, uid=0, handler=ENABLED)
    for _ in range(2):
        result = machine.run()
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert machine.calls.read_text() == ""
    assert (machine.binfmt / "qemu-aarch64").read_text() == ENABLED  # not re-registered


@pytest.mark.parametrize("handler, expected", [
    (ENABLED, 0), (None, 1), (ENABLED.replace("POF", "PO"), 1), (ENABLED.replace("enabled", "disabled"), 1),
], ids=["on", "absent", "no-F-flag", "disabled"])
def test_check_says_whether_emulation_is_on_and_changes_nothing(handler, expected, tmp_path):
    machine = Machine(tmp_path, uid=1000, handler=handler)
    result = machine.run("--check")
    assert (result.returncode, result.stdout, result.stderr) == (expected, "", "")
    assert machine.calls.read_text() == ""


def test_enabling_needs_root_and_a_wrong_argument_is_one_line(tmp_path):
    machine = Machine(tmp_path, uid=1000)
    result = machine.run()
    assert result.returncode == 1
    assert result.stderr == f"tflab: registering an emulator needs root; run: sudo {SCRIPT}\n"
    result = machine.run("--yes")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "--yes is not allowed" in result.stderr


def test_make_test_and_test_integration_run_the_script_first():
    makefile = (REPO / "Makefile").read_text()
    for target in ("test", "test-integration"):
        line = next(line for line in makefile.splitlines() if line.startswith(f"{target}:"))
        assert "arm64-emulation" in line.split("##")[0], line
    assert "\t@scripts/enable-arm64-emulation.sh --if-needed\n" in makefile


BROKEN_RUNS = {
    "config-not-json": {"config.json": "{bad"},
    "config-wrong-types": {"config.json": '{"settings": 3, "tasks": "x"}'},
    "config-a-folder": {"config.json/": ""},
    "summary-nested-deep": {"config.json": '{"settings": {}, "tasks": []}', "summary.json": "[" * 100_000},
    "compare-a-string": {"compare.json": '{"runs": "abc"}'},
    "compare-escapes": {"compare.json": '{"runs": ["../../etc"]}'},
}


def write_run(folder, files: dict[str, str]):
    folder.mkdir(parents=True)
    for name, content in files.items():
        if name.endswith("/"):
            (folder / name).mkdir()
        else:
            (folder / name).write_text(content)
    return sorted(path.name for path in folder.iterdir())


@pytest.mark.parametrize("run", BROKEN_RUNS)
def test_make_report_refuses_a_broken_run_before_it_builds_the_venv(run, tmp_path):
    """`make report` once built .venv (TensorFlow and all, minutes) and only then found the run unreadable."""
    import sys
    import time

    runs, venv = tmp_path / "runs", tmp_path / "venv"
    before = write_run(runs / run, BROKEN_RUNS[run])
    started = time.monotonic()
    result = subprocess.run(["make", "--no-print-directory", "report", f"RUN={run}", f"RUNS_DIR={runs}",
                             f"VENV={venv}", f"PYTHON={sys.executable}"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env=lab_env())
    seconds = time.monotonic() - started
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"tflab: {runs / run}") or lines[0].startswith(f"tflab: {run}"), lines
    assert "a file the lab did not write, or one cut short" in lines[0] and "Traceback" not in result.stderr
    assert all(line.startswith("make: *** ") for line in lines[1:]), lines
    assert not venv.exists() and "pip" not in result.stdout
    assert sorted(path.name for path in (runs / run).iterdir()) == before  # nothing written
    assert seconds < 10, seconds  # make and the host's Python start; measured about 0.3 s


@pytest.mark.parametrize("files", [
    {"config.json": '{"settings": {"strategy": "single"}, "tasks": ["t"]}'},  # killed before its summary
    {"compare.json": '{"runs": ["single", "gone"]}'},  # a compare folder whose run was removed
], ids=["no-summary", "compare-missing-run"])
def test_the_check_passes_a_run_the_report_can_read(files, tmp_path):
    from tflab.cli import reading

    write_run(tmp_path / "run", files)
    reading.check_report(tmp_path / "run")  # raises LabError if refused
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == sorted(files)


@pytest.mark.parametrize("tag_only", [True, False])
def test_images_tag_prints_the_bare_tag_alone_on_stdout(tag_only, monkeypatch, capfd):
    """For a Dockerfile's FROM or a script: $(tflab images --tag). The build's progress, the lab's own
    lines and its subprocesses' (docker build, debootstrap), goes to stderr meanwhile."""
    from tflab import cli, images
    from tflab.engine import docker

    def build(*args):
        print("tflab: building tflab-trainer:cpu-0123456789ab: step 3/3")
        subprocess.run(["echo", "a subprocess's progress"], check=True)
        return "tflab-trainer:cpu-0123456789ab"

    monkeypatch.setattr(docker, "check", lambda: "engine")
    monkeypatch.setattr(images, "trainer_variant", lambda settings: images.variant())
    monkeypatch.setattr(images, "ensure_image", build)
    FakeEngine(monkeypatch, stdout="1380000000\n")
    assert cli.main(["images", *(["--tag"] if tag_only else [])]) == 0
    out, err = capfd.readouterr()
    if tag_only:
        assert out == "tflab-trainer:cpu-0123456789ab\n"
        assert err == "tflab: building tflab-trainer:cpu-0123456789ab: step 3/3\na subprocess's progress\n"
    else:  # as before: the tests' fixtures read the tag from the last line's second word
        assert out.splitlines()[-1].split()[1] == "tflab-trainer:cpu-0123456789ab" and err == ""
        assert "a subprocess's progress" in out
