"""The lab's commands as its settings see them: which commands are a run (RUNS) or read what runs
left (RUN_FOLDERS), which values a command cannot honour (the *_REFUSED tables a declaration in
core/settings.py names), the Makefile's variable protocol (the TFLAB_MAKE_* variables it hands the
lab, checked by check_make_variables) and how the user runs the lab (lab_command: make X or tflab X).

In core/, not beside the CLI, because core needs these: the declarations name RUNS and the refusals,
Settings.from_env checks make's variables, and core/explain.py and core/runfolder.py word their
fixes with lab_command (core imports only core). What only the CLI uses of the protocol (which
setting a command reads, refusing one given to a command that never reads it) is tflab/cli/protocol.py's.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping

from tflab.core.grammars import SettingsError, script_env_hint

# Which command reads which setting. A setting given by name (NAME=value, a flag, on make's
# command line) to a command that does not read it is refused: the command would drop it silently.
# run or describe one
RUNS = ("up", "stack-up", "compare", "matrix", "bench", "chaos", "soak", "chaos-grid", "config", "k8s")
RUN_FOLDERS = ("report", "summary", "why", "logs", "down", "clean")  # read what runs left

# The Makefile's own variables, which `make up NAME=value` may set besides the settings (Makefile).
MAKE_VARIABLES_ENV = "TFLAB_MAKE_VARIABLES"  # the Makefile's command-line variable names
MAKE_OWN_ENV = "TFLAB_MAKE_OWN"  # the Makefile's own overridable variables
MAKE_BROKEN_ENV = "TFLAB_MAKE_BROKEN"  # the pieces of a make variable's name that holds a line break
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")  # what a make variable's name is shown unquoted as


def lab_command(words: str) -> str:
    """A lab command as the user would type it again: `make logs` under make (the Makefile sets
    TFLAB_MAKE_VARIABLES), `tflab logs` from the installed command, `python3 -m tflab logs` from
    `python3 -m tflab`. A fix names the command the user ran, not always make's."""
    if MAKE_VARIABLES_ENV in os.environ:
        return f"make {words}"
    if Path(sys.argv[0]).name == "__main__.py":
        return f"python3 -m tflab {words}"
    return f"tflab {words}"


def check_make_variables(env: Mapping[str, str], settings: Iterable[str]) -> None:
    """`make up WORKER=3`: make takes any NAME=value, so the Makefile hands the lab the names of
    its command-line variables (TFLAB_MAKE_VARIABLES) and of its own (TFLAB_MAKE_OWN), and a name
    that is neither a setting nor the Makefile's is refused here, naming what it resembles. A name
    is shown as given where it is plain, else escaped as Python writes it: it may hold quotes,
    `$`, escape sequences. `settings`: the names of every setting."""
    settings = list(settings)
    broken = env.get(MAKE_BROKEN_ENV, "").split()
    if broken:
        raise SettingsError(f"a make variable's name holds a line break (around {_shown_name(broken[0])}); "
                            "a setting's name is upper-case letters, digits and _")
    own = env.get(MAKE_OWN_ENV, "").split()
    for name in env.get(MAKE_VARIABLES_ENV, "").split():
        if name in settings or name in own:
            continue
        value = env.get(name, "")
        close = difflib.get_close_matches(name.upper(), [*settings, *own], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "`make help` lists the settings"
        hint += script_env_hint(name, env)
        case = " (settings are upper case)" if name.upper() in settings else ""
        if not PLAIN_NAME.fullmatch(name):
            raise SettingsError(f"make variable {_shown_name(name)} is not a setting: a setting's name is upper-case "
                                f"letters, digits and _; {hint}")
        shown = value if value.isprintable() and len(value) <= 100 else repr(value[:100])
        raise SettingsError(f"{name}={shown} is not a setting{case}; {hint}")


def _shown_name(name: str) -> str:
    """A name as a message quotes it: repr escapes every quote, control character and escape sequence."""
    return repr(name[:100]) + ("..." if len(name) > 100 else "")


# A value these commands cannot honour, from the environment too, refused when the command starts:
# a user's script where the pods run the lab's. (make chaos and soak time a script's faults by
# its own epochs, which trainer/observe.py logs, or by seconds from its start.)
SCRIPT_REFUSED = {
    "k8s": "make k8s: the manifests run the lab's own trainer (bake your script into an image of yours and "
           "name it in K8S_IMAGE)",
}
# TFJOB, where the TFJob would be taken to shape what a command other than `up` runs or writes.
TFJOB_REFUSED = {command: f"make {command}: only make up (tflab up), make chaos and make matrix replay a TFJob, and "
                          "make k8s turns one into a TrainJob; leave TFJOB out"
                 for command in RUNS if command not in ("up", "k8s", "chaos", "matrix")}
TRAINJOB_REFUSED = {command: f"make {command}: only make up (tflab up), make chaos and make matrix replay a "
                             "TrainJob; leave TRAINJOB out"
                    for command in RUNS if command not in ("up", "chaos", "matrix")}
# make matrix TFJOB=: what each cell varies (the trainer image and its Keras); all else the job decides,
# as for `up`, and STRATEGIES does not apply (tfjob.refuse_given, trainjob.refuse_given).
MATRIX_VARIES = ("TF", "KERAS")
