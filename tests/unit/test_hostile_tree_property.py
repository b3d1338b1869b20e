"""Run folders as a hostile task (or a host user) could leave them, for the lab running as root
(issue 34): any name the lab reads or writes may be a link to a root-only host file, a link to a
folder outside, a FIFO, or a folder; in the tasks' space, or (a run from before the two spaces, or
a host user's doing) in the lab's own. Every reader (`tflab summary`, `why`, `logs`, `report`,
the fixture's LabRun, the live printers, the summary's own computation) and every writer of the
lab's records (summary.json, link profiles, GCE notices, the down mark, chaos events, output.log)
is run over generated trees: no host file outside the run folder is changed or printed, nothing
blocks on a FIFO, and each command ends in its output or one line. Derandomized, no database.
"""

import contextlib
import io
import json
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tflab import cli, pytest_plugin
from tflab.backends.compose import TaskOutput
from tflab.core import cluster, runfolder, runowner
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.settings import Settings
from tflab.supervisor import progress, summary

SECRET = "root-only-secret-5f1c9e"  # the host file's content: it must never be printed
TASKS = ["worker-0", "worker-1"]
TASK_FILES = [f"{task}.{kind}" for task in TASKS for kind in ("jsonl", "out")] + ["model.keras", "work", "backup"]
LAB_FILES = ["config.json", "summary.json", "output.log", "owner.json", "chaos.jsonl", "ended-by-down", "links",
             "metadata", "compose.run.json", "tasks"]
KINDS = ["file", "link-to-secret", "link-to-folder", "fifo", "folder", "dangling-link"]


def lab_config() -> dict:
    return {"run": "r", "settings": Settings(workers=2).to_dict(), "tasks": TASKS,
            "cluster": {"worker": ["worker-0:2222", "worker-1:2222"]}, "layout": runfolder.LAYOUT}


def epoch_log(task: str) -> bytes:
    records = [{"event": "start", "task": task, "time": 1.0, "role": "trainer", "strategy": "multiworker",
                "cluster": {}, "versions": {}, "settings": {}, "baseline_loss": 1.0},
               {"event": "epoch", "task": task, "time": 2.0, "epoch": 1, "loss": 0.5, "seconds": 1.0, "steps": 4}]
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def content(name: str) -> bytes:
    if name == "config.json":
        return json.dumps(lab_config()).encode()
    if name.endswith(".jsonl") and name[:-6] in TASKS:
        return epoch_log(name[:-6])
    if name == "output.log":
        return b"worker-0 | 2026-12-06T00:00:00+00:00 hello\n"
    return b"{}"


@st.composite
def trees(draw):
    """(two_spaces, {relative name: kind}) for the names planted; the others are as the lab writes them."""
    two = draw(st.booleans())
    names = [f"tasks/{name}" if two else name for name in TASK_FILES] + \
        [name for name in LAB_FILES if name != "tasks" or two]
    planted = draw(st.dictionaries(st.sampled_from(names), st.sampled_from(KINDS), min_size=1, max_size=6))
    if two and planted.get("tasks") not in (None, "folder"):
        planted.pop("tasks")  # a run whose tasks' space is gone is no two-space run; the one-folder case covers it
    return two, planted


def build(root: Path, two: bool, planted: dict) -> tuple[Path, Path, Path]:
    secret = root / "host" / "secret"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    secret.chmod(0o600)
    outside = root / "host" / "folder"
    outside.mkdir()
    (outside / "worker-0.jsonl").write_text(SECRET)
    run_dir = root / "runs" / "r"
    run_dir.mkdir(parents=True)
    if two:
        (run_dir / "tasks").mkdir()
    for name in ["config.json", "output.log"] + [f"{'tasks/' if two else ''}{t}.jsonl" for t in TASKS]:
        (run_dir / name).write_bytes(content(Path(name).name))
    for name, kind in planted.items():
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            continue  # the tasks' space itself stays a folder
        path.unlink(missing_ok=True)
        if kind == "file":
            path.write_bytes(content(path.name))
        elif kind == "link-to-secret":
            path.symlink_to(secret)
        elif kind == "link-to-folder":
            path.symlink_to(outside)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        else:
            path.symlink_to(root / "host" / "nothing-here")
    return run_dir, secret, outside


def state_of(root: Path) -> dict:
    """Every file outside the run folder, with its content: what the lab must leave as it was."""
    return {str(path): (path.read_bytes() if path.is_file() else b"")
            for path in sorted((root / "host").rglob("*"))}


@contextlib.contextmanager
def bounded(seconds: int = 300):
    """A FIFO opened for reading without O_NONBLOCK would wait forever: the test fails instead."""
    def timed_out(*_):
        raise TimeoutError("a reader blocked (a FIFO opened by name?)")
    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(*arguments: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(arguments))
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text
    assert code == 0 or (code == 2 and len(err.getvalue().splitlines()) == 1), (arguments, code, text)
    return code, text


def read_everything(run_dir: Path, commands=("summary", "why", "logs", "report")) -> str:
    runs = run_dir.parent
    said = []
    for command in commands:
        said.append(run_cli(command, f"RUNS_DIR={runs}", "RUN=r")[1])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        lab = pytest_plugin.LabRun(returncode=0, output="", run_dir=run_dir)
        for read in (lambda: lab.summary, lambda: lab.events("worker-0"), lambda: lab.why(), lambda: lab.tasks):
            try:
                said.append(str(read()))
            except LabError as error:
                said.append(str(error))
        the_cluster = cluster.build(Settings(workers=2))
        for printer in (progress.ProgressPrinter(Settings(workers=2), the_cluster, run_dir),
                        progress.ScriptOutputPrinter(the_cluster, run_dir)):
            printer.print_new()
        try:
            made = summary.summarise(run_dir, summary.lab_rows(Settings(workers=2), the_cluster, run_dir,
                                                                  {t: 0 for t in TASKS}, [], "ok"), "ok", 0.0, 1.0)
            said.append(json.dumps(made.to_dict()))
        except LabError as error:
            said.append(str(error))
    return "\n".join(said) + out.getvalue()


def write_everything(run_dir: Path) -> None:
    """Each writer of the lab's records, as a run, chaos and down call it; each may refuse (an old
    folder, a folder in a file's place) but never writes through what it finds there."""
    the_summary = summary.Summary(run="r", strategy="multiworker", backend="compose", outcome="ok", ok=True,
                                  launched_at=0.0, wall_seconds=1.0, settings={}, weights_agree=True, tasks=[])
    writers = [lambda: the_summary.write(run_dir), lambda: runfolder.set_link(run_dir, "worker-0", "10ms,0mbit"),
               lambda: runfolder.set_notice(run_dir, "worker-0", True),
               lambda: runowner.mark_ended_by_down(run_dir),
               lambda: runfolder.write_lab_json(run_dir, "compose.run.json", {})]
    for write in writers:
        try:
            write()
        except (OSError, LabError):
            pass
    output = TaskOutput(run_dir, runfolder.OUTPUT)
    output._open()
    output.finish([]) if output.error is None else None


@settings(max_examples=60, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tree=trees())
def test_no_hostile_tree_makes_the_lab_change_print_or_block(tmp_path_factory, tree):
    two, planted = tree
    root = tmp_path_factory.mktemp("tree")
    run_dir, secret, outside = build(root, two, planted)
    before = state_of(root)
    with bounded():
        said = read_everything(run_dir)
        write_everything(run_dir)
        said += read_everything(run_dir, ("summary", "why", "logs"))
    assert SECRET not in said, planted
    assert state_of(root) == before, f"a host file outside the run folder changed: {planted}"
    assert secret.read_text() == SECRET and oct(secret.stat().st_mode & 0o777) == "0o600"


def test_a_link_at_every_name_is_refused_by_name(tmp_path):
    """The reader's own words for a link: one line naming the file, never its target's content."""
    run_dir, secret, _ = build(tmp_path, True, {"tasks/worker-0.jsonl": "link-to-secret"})
    with pytest.raises(ForeignFile, match=r"worker-0\.jsonl is a link, which the lab never follows"):
        runfolder.events(run_dir, "worker-0")


def test_a_link_in_place_of_the_tasks_space_reads_as_an_old_folder_and_follows_nothing(tmp_path):
    run_dir, secret, outside = build(tmp_path, True, {})
    (run_dir / "tasks" / "worker-0.jsonl").unlink()
    (run_dir / "tasks" / "work").symlink_to(outside)
    with pytest.raises(ForeignFile, match="is a link"):
        runfolder.read_task_file(run_dir, "work/worker-0.jsonl", 1024)


# The set-ID walk (setidbits.strip_setid, issue 56) over generated trees: folders nested at random,
# set-ID files and folders, links to a set-ID host file and to a host folder, and bounds small
# enough to be reached. Whatever the bounds, no link is followed, and every entry that keeps its
# bit lies beneath a subtree the walk named; with bounds past the tree, nothing keeps it.
SETID_TREE = st.recursive(
    st.sampled_from(["file", "setuid", "setgid", "link-to-setuid", "link-to-folder"]),
    lambda inner: st.dictionaries(st.sampled_from([f"n{index}" for index in range(6)]), inner, max_size=5),
    max_leaves=40)


def plant_setid_tree(folder: Path, spec, host: Path) -> None:
    if not isinstance(spec, dict):
        return
    folder.mkdir(exist_ok=True)
    for name, child in spec.items():
        path = folder / name
        if isinstance(child, dict):
            plant_setid_tree(path, child, host)
            if len(child) % 2:
                path.chmod(0o2755)  # a set-GID folder now and then
        elif child == "link-to-setuid":
            path.symlink_to(host / "setuid")
        elif child == "link-to-folder":
            path.symlink_to(host)
        else:
            path.write_text("x")
            path.chmod({"file": 0o755, "setuid": 0o4755, "setgid": 0o2755}[child])


@settings(max_examples=80, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=st.dictionaries(st.sampled_from(["a", "b", "c"]), SETID_TREE, min_size=1, max_size=3),
       depth=st.integers(0, 5), most=st.integers(0, 40))
def test_the_setid_walk_names_every_subtree_a_bound_kept_it_from(tmp_path_factory, spec, depth, most):
    from tflab.core import setidbits

    root = tmp_path_factory.mktemp("setid")
    host = root / "host"
    host.mkdir()
    (host / "setuid").write_text("x")
    (host / "setuid").chmod(0o4755)
    tree = root / "tree"
    plant_setid_tree(tree, spec, host)
    result = setidbits.strip_setid(tree, depth=depth, most=most)
    assert oct((host / "setuid").stat().st_mode & 0o7777) == "0o4755" and (host).stat().st_mode & 0o7000 == 0
    named = [where.split(" (")[0] for where in result.skipped + result.unentered]
    for folder, folders, files in os.walk(tree):
        for name in folders + files:
            path = Path(folder) / name
            found = os.lstat(path).st_mode
            if found & 0o6000 and not (found & 0o170000 == 0o120000):
                relative = str(path.relative_to(tree))
                assert any(above == "." or relative.startswith(f"{above}/") for above in named), (relative, result)
    assert result.complete is (not result.skipped and not result.unentered)
    assert setidbits.strip_setid(tree).complete
