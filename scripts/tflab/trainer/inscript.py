"""Runs a user's script (SCRIPT=...) in this process, after the lab's hooks are installed:

    python -m tflab.trainer.inscript /lab/script/train.py --epochs 3

The launcher (launch.py) starts this in place of `python train.py`, so the lab can see and set up
what only the script's own process holds (its TensorFlow devices, what Keras does each epoch)
without a line of the script changing. The script runs as `python train.py` would run it: as
`__main__`, with `sys.argv` its path and arguments and its folder first on `sys.path`; its exit
code, exceptions and signals are its own.

A hook is a function of the imported module, called once, right after the module it waits for is
first imported (`when_imported`), so nothing is imported that the script would not import itself:
a hook that waits for `tensorflow` runs after `import tensorflow` and before the script's next
line. A hook that fails says so on stderr and the script runs on: the lab's instruments must never
be what breaks a user's job.

Stdlib only until a hook's module is imported by the script.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys
import threading
from typing import Callable

# Modules under tflab.trainer whose `install()` runs before the script: each registers its hooks.
HOOKS: tuple[str, ...] = ("tflab.trainer.signals", "tflab.trainer.observe", "tflab.trainer.devices",
                          "tflab.trainer.kerasversion", "tflab.trainer.audit")

_waiting: dict[str, list[Callable]] = {}
_lock = threading.RLock()


@functools.cache
def task_log():
    """The task's JSONL log (TFLAB_LOG, TFLAB_TASK, which the launcher sets), one writer for every
    hook in this process; None outside the lab."""
    path, task = os.environ.get("TFLAB_LOG"), os.environ.get("TFLAB_TASK")
    if not (path and task):
        return None
    from tflab.core.schema import EventLog

    return EventLog(path, task)


@functools.cache
def run_config():
    """The run's config.json and its settings (TFLAB_CONFIG), read once for every hook, as the
    launcher reads them; None outside the lab."""
    path = os.environ.get("TFLAB_CONFIG")
    if not path:
        return None
    from tflab.core.runfolder import read_run_config

    return read_run_config(path)


def run_settings():
    """The run's settings, from run_config; None outside the lab."""
    found = run_config()
    return found[1] if found is not None else None


def complain(what: str, error: BaseException) -> None:
    print(f"tflab: {what} failed, and the script runs on without it: {type(error).__name__}: {error}",
          file=sys.stderr, flush=True)


def run_hooks(name: str, module) -> None:
    with _lock:
        hooks = _waiting.pop(name, [])
    for hook in hooks:
        try:
            hook(module)
        except Exception as error:  # noqa: BLE001 - see the module's docstring
            complain(f"the lab's hook {getattr(hook, '__qualname__', hook)} on {name}", error)


def when_imported(name: str, hook: Callable) -> None:
    """Calls hook(module) once `name` is imported: now, where it already is."""
    with _lock:
        if name not in sys.modules:
            _waiting.setdefault(name, []).append(hook)
            if not any(isinstance(finder, _Watcher) for finder in sys.meta_path):
                sys.meta_path.insert(0, _Watcher())
            return
    try:
        hook(sys.modules[name])
    except Exception as error:  # noqa: BLE001
        complain(f"the lab's hook {getattr(hook, '__qualname__', hook)} on {name}", error)


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module a hook waits for, it asks the finders after it and wraps
    the loader, so the hooks run once the module's own code has."""

    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenHooks(spec.loader)
        return spec


class _ThenHooks(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its own loader: importlib.resources and pkgutil ask it for files.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        run_hooks(module.__name__, module)


def install_hooks(hooks: tuple[str, ...] = HOOKS) -> None:
    for name in hooks:
        try:
            importlib.import_module(name).install()
        except Exception as error:  # noqa: BLE001
            complain(f"installing the lab's {name}", error)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m tflab.trainer.inscript SCRIPT.py [ARGS...]", file=sys.stderr)
        sys.exit(2)
    script = argv[0]
    sys.argv = argv
    # As `python train.py`: the script's folder, not this module's, is first on the path.
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    install_hooks()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
