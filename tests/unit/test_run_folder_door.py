"""One way to open a run-folder path (issue 34): beneath.py opens every path inside a run folder
from a handle on the folder, with no link followed at any step (setidbits.py walks a tree from its
handles), and runfolder.py names the files.
A task runs a pull request's code and writes its run's tasks' space; the lab may run as root. So
no other host module opens, reads, writes, renames, removes, links or chmods a path by name with
Python's file primitives, except the few listed below, which never touch a run folder: each says
why, and none of their calls names a run folder. A new module that opens files, or a listed one
that starts to take a run folder, fails here, so the next file the lab writes cannot reopen the hole."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"
# The door and the names of what lies behind it, and the walk that changes modes beneath it from
# the door's handles (os.open with dir_fd and O_NOFOLLOW, fchmod): it touches a run folder, so it
# is no module of ALLOWED's, which never do.
DOORS = {"beneath.py", "runfolder.py", "setidbits.py"}
TRAINER = {"trainer"}  # inside the containers: it writes its own tasks' space, as the task it is

# Calls that open or change a path by name.
FUNCTIONS = {"open", "os.open", "os.replace", "os.rename", "os.unlink", "os.remove", "os.symlink", "os.link",
             "os.chmod", "os.chown", "os.lchown", "os.mkdir", "os.makedirs", "os.rmdir", "os.listdir",
             "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.rmtree", "shutil.move",
             "io.open"}
METHODS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "unlink", "rename",
           "symlink_to", "hardlink_to", "chmod", "mkdir", "rmdir", "touch", "iterdir", "glob", "rglob"}
DOOR_CALLS = ("folder.", "self.folder", "beneath", "runfolder.", "foreign.")  # calls through the door
# Modules that use them, each on paths that are never a run folder's.
ALLOWED = {
    "images/builder.py": "build contexts under images/, made and removed by the lab itself",
    "cli/makesignals.py": "/proc of make's processes (signal forwarding)",
    "console.py": "/dev/null, for stdout once `tflab logs | head` has closed the pipe or a write to it failed",
    "core/settings.py": "/dev/null, for stdout once a write of `--markdown`'s table to it failed",
    "cli/upkeep.py": "RUNS_DIR itself: counts its run folders (clean), makes it (tensorboard)",
    "core/processes.py": "/proc/<pid>/stat and cmdline (the owner check, the reaper), /proc/self/statm (a task's "
                         "epoch RSS), never a run's file",
    "core/orphans.py": "/proc/<pid>/stat and environ (a local run's orphans, the reaper's mark), never a run's file",
    "home.py": "the installed copy of the lab's own files",
    "reports/imagebench.py": "a scratch copy of the checkout for a code-only rebuild",
    "images/__init__.py": "wheels and stamps under images/, a script's constraints in its build context",
    "images/record.py": ".built.json and its lock under images/trainer",
    "images/libraries.py": "the copies of images' TensorFlow under images/trainer/.libraries, the lab's own",
    "images/platforms.py": "binfmt_misc under /proc",
    "k8s/manifest.py": "the user's manifest and the lab's vendored schemas",
    "reports/matrix.py": "matrix.json of a matrix folder (the lab's own, beside its runs)",
    "backends/swarm/nodes.py": "the simulated swarm's state file under the lab's own folder",
    "tools/swarmsim.py": "provisioning: network namespaces and engine folders of its own",
    "tools/lock.py": "requirements/ lock files, written by a maintainer",
    "backends/userscript.py": "the SCRIPT's own folder, copied into the lab's space before any task starts, and its "
                              "source, read for warnings",
    "replay/volumes.py": "a replay's volumes, made before any replica starts (no link followed)",
    "replay/watcher.py": "a replica container's peak memory from its cgroup under /sys/fs/cgroup",
    "k8s/writer.py": "removes its own manifests when writing them failed",
    "images/keraslock.py": "the Keras lock files under requirements/keras",
    "faults/twin.py": "the lab's own package's sources, hashed into a BACKEND=local twin's key",
    "reports/report.py": "matplotlib and the text writers write into a private temporary folder (replace_whole)",
    "core/schema.py": "EventLog: a task appends to its own log (a replay watcher: the tasks/ folder, O_NOFOLLOW)",
}


def calls(path: Path) -> list[tuple[int, str, str]]:
    """(line, the primitive, the call's source) for each path primitive the module calls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in FUNCTIONS or (isinstance(node.func, ast.Attribute) and node.func.attr in METHODS
                                 and not name.startswith(DOOR_CALLS)):
            found.append((node.lineno, name, ast.unparse(node)))
    return found


def host_modules() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if path.relative_to(PACKAGE).parts[0] not in TRAINER and path.name not in DOORS)


@pytest.mark.parametrize("module", host_modules())
def test_no_host_module_opens_a_path_by_name_except_the_listed(module):
    found = [f"line {line}: {source}" for line, _, source in calls(PACKAGE / module)]
    if module not in ALLOWED:
        assert found == [], f"{module} opens paths by name; a run folder's go through runfolder/beneath"
    else:
        assert found, f"{module} is listed as opening paths but opens none: take it off the list"


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_the_listed_modules_never_open_a_run_folder_path(module):
    touching = [f"line {line}: {source}" for line, _, source in calls(PACKAGE / module)
                if any(word in source for word in ("run_dir", "run_folder", "runfolder", "OUTPUT", "SUMMARY",
                                                    "OWNER", "CHAOS_LOG", "CONFIG", ".jsonl"))]
    assert touching == []


@pytest.mark.parametrize("source, expected", [
    ('open(run_dir / "output.log")', ["open"]),
    ('(run_dir / "x").write_text("y")', ["(run_dir / 'x').write_text"]),
    ('os.replace(a, b)', ["os.replace"]),
    ('folder.read("tasks/x", 10)', []),  # through the door
    ('runfolder.write_whole(path, text)', []),
])
def test_the_check_sees_what_it_should(tmp_path, source, expected):
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert [name for _, name, _ in calls(module)] == expected
