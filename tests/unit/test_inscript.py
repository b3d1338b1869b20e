"""trainer/inscript.py: a user's script run in the lab's process as `python train.py` runs it, with
the lab's hooks called once the modules they wait for are imported."""

import functools
import subprocess
import sys
import textwrap

import pytest
from labtest.cli import lab_env

pytestmark = pytest.mark.unit


def run(tmp_path, source: str, *args: str, prelude: str = ""):
    """`python -m tflab.trainer.inscript script.py ARGS`, or with `prelude` (hooks registered
    first) through a small driver that calls inscript.main as the module's own __main__ does."""
    (tmp_path / "script.py").write_text(textwrap.dedent(source))
    if prelude:
        driver = ("import sys\nfrom tflab.trainer import inscript\n" + textwrap.dedent(prelude)
                  + "inscript.main(sys.argv[1:])\n")
        command = [sys.executable, "-c", driver, str(tmp_path / "script.py"), *args]
    else:
        command = [sys.executable, "-m", "tflab.trainer.inscript", str(tmp_path / "script.py"), *args]
    return subprocess.run(command, cwd=tmp_path, env=lab_env(), capture_output=True, text=True, timeout=60)


def test_the_script_runs_as_main_with_its_arguments_and_its_folder_on_the_path(tmp_path):
    (tmp_path / "helper_module.py").write_text("VALUE = 'beside the script'\n")
    result = run(tmp_path, """
        import sys
        import helper_module
        print(__name__, sys.argv[1:], helper_module.VALUE, sys.argv[0].endswith('script.py'))
        """, "--epochs", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "__main__ ['--epochs', '3'] beside the script True"


@pytest.mark.parametrize("source, code, stderr", [
    ("import sys\nsys.exit(3)\n", 3, ""),
    ("raise ValueError('bad shape')\n", 1, "ValueError: bad shape"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", -15, ""),
])
def test_the_exit_code_and_traceback_are_the_scripts_own(tmp_path, source, code, stderr):
    result = run(tmp_path, source)
    assert result.returncode == code
    assert stderr in result.stderr


def test_a_hook_runs_once_its_module_is_imported_and_before_the_scripts_next_line(tmp_path):
    (tmp_path / "watched.py").write_text("print('watched: imported')\n")
    result = run(tmp_path, """
        print('script: before')
        import watched
        print('script: after', watched.SEEN)
        import watched
        """, prelude="""
        inscript.when_imported('watched', lambda module: [print('hook: ran'), setattr(module, 'SEEN', 1)])
        """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["script: before", "watched: imported", "hook: ran", "script: after 1"]


def test_a_hook_on_a_module_already_imported_runs_at_once(tmp_path):
    result = run(tmp_path, "print('script')\n", prelude="""
        import json
        inscript.when_imported('json', lambda module: print('hook on', module.__name__))
        """)
    assert result.stdout.split() == ["hook", "on", "json", "script"]


def test_a_failing_hook_is_said_and_the_script_runs_on(tmp_path):
    (tmp_path / "watched.py").write_text("")
    result = run(tmp_path, "import watched\nprint('script: done')\n",
                 prelude="inscript.when_imported('watched', lambda module: 1 / 0)\n")
    assert result.returncode == 0
    assert result.stdout.strip() == "script: done"
    assert "failed, and the script runs on without it: ZeroDivisionError" in result.stderr


def test_a_hooked_module_keeps_its_own_loader(tmp_path):
    (tmp_path / "watched.py").write_text("")
    result = run(tmp_path, "import watched\nprint(type(watched.__loader__).__name__, "
                           "type(watched.__spec__.loader).__name__)\n",
                 prelude="inscript.when_imported('watched', lambda module: None)\n")
    assert result.stdout.split() == ["SourceFileLoader", "SourceFileLoader"]


def test_the_epoch_observer_is_a_hook_and_its_watch_is_installed_once_and_chained(tmp_path, monkeypatch):
    """trainer/observe.py on a stand-in for Keras's CallbackList (the real ones: test_observe.py):
    a second install wraps nothing twice, a later patch by another hook still reaches the original,
    and what it logs comes from the calls fit makes."""
    from tflab.core.schema import read_events
    from tflab.trainer import inscript, observe

    assert "tflab.trainer.observe" in inscript.HOOKS
    # A log of this test's own: task_log is made once a process, from the environment set below.
    monkeypatch.setattr(inscript, "task_log", functools.cache(inscript.task_log.__wrapped__))
    monkeypatch.setenv("TFLAB_LOG", str(tmp_path / "worker-0.jsonl"))
    monkeypatch.setenv("TFLAB_TASK", "worker-0")
    monkeypatch.setenv("TFLAB_OUTPUT", str(tmp_path))
    calls = []

    class BackupAndRestore:
        backup_dir = str(tmp_path / "backup")

    class CallbackList:
        def __init__(self, callbacks):
            self.callbacks, self.params = callbacks, {"epochs": 3}

    for name in observe.WATCHED:
        setattr(CallbackList, name, lambda self, *args, name=name, **kwargs: calls.append(name))
    observe.watch(CallbackList)
    observe.watch(CallbackList)  # idempotent
    patched = CallbackList.on_epoch_end
    CallbackList.on_epoch_end = lambda self, *args, **kwargs: calls.append("another hook") or patched(self, *args)
    fit = CallbackList([BackupAndRestore()])
    fit.on_train_begin()
    fit.on_epoch_begin(1)
    fit.on_train_batch_begin(0)
    fit.on_train_batch_end(7, {"loss": "a tensor the watch never reads"})
    fit.on_epoch_end(1, {"loss": 0.25})
    assert calls == ["on_train_begin", "on_epoch_begin", "on_train_batch_begin", "on_train_batch_end",
                     "another hook", "on_epoch_end"]
    records = read_events(tmp_path / "worker-0.jsonl")
    assert isinstance(records[-1]["rss_bytes"], int) and records[-1]["rss_bytes"] > 0  # the audit's memory growth
    measured = ("task", "time", "seconds", "rss_bytes", "pss_bytes", "uss_bytes")
    events = [{k: v for k, v in r.items() if k not in measured} for r in records]
    assert events == [
        {"event": "fit", "epoch": 2, "step": 0, "epochs": 3, "backup_dir": str(tmp_path / "backup"),
         "backup_kept": True},
        {"event": "restored", "epoch": 2, "step": 0},
        {"event": "epoch", "epoch": 2, "loss": 0.25, "steps": 8}]
