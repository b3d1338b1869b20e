"""What an exit code says by itself, where no signature of explain.py and no traceback explains a
failure: 128 + N is signal N, as a shell and a container engine say it; 126 and 127 are the shell's
own (POSIX, "Command Search and Execution": 127 where the command is not found, 126 where it is
found but cannot be run), and Docker's runtime gives a container the same codes when its command
cannot be started. Anything else is the program's own.

Shared by the host side and the launcher inside the image: imports neither TensorFlow nor Docker.
"""

from __future__ import annotations

import re

FIRST_SIGNAL_CODE = 128  # 128+N: ended by signal N, as a shell and a container say it
NOT_FOUND = 127
NOT_EXECUTABLE = 126
SIGNAL_NAMES = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV", 2: "SIGINT"}
# Where the name of what was not found is printed: dash ("sh: 1: python: not found"), bash ("bash:
# python: command not found", "line 3: ./run.sh: No such file or directory") and Docker's runtime
# ('exec: "python": executable file not found in $PATH').
MISSING = re.compile(r'exec: "([^"\n]{1,200})": executable file not found|'
                     r"^(?:[^:\n]{0,200}: )?(?:line \d+: |\d+: )?([^\s:]{1,200}): (?:command )?not found$|"
                     r"^(?:[^:\n]{0,200}: )?(?:line \d+: |\d+: )?([^\s:]{1,200}): (?:Permission denied|"
                     r"No such file or directory|Is a directory|cannot execute[^\n]{0,100})$", re.M)


def describe_code(code: int) -> str:
    if code >= FIRST_SIGNAL_CODE:
        number = code - FIRST_SIGNAL_CODE
        return f"was ended by {SIGNAL_NAMES.get(number, f'signal {number}')} (exit code {code})"
    return f"exited with code {code}"


def shell_code(code: int, output: str) -> tuple[str, str] | None:
    """(what, fix) for the shell's own codes, 126 and 127, naming what the output says was not found
    or could not run; None for any other code."""
    if code not in (NOT_FOUND, NOT_EXECUTABLE):
        return None
    matched = MISSING.search(output or "")
    name = next((group for group in matched.groups() if group), "") if matched else ""
    named = f" (`{name}`, its output says)" if name else ""
    if code == NOT_FOUND:
        return (f"exited with code 127, the shell's code for a command not found{named}: the task's command, or "
                "a program it runs, is not on the task's PATH",
                "check the command's first word is installed in the task's image and spelled as installed: "
                "Debian's images have `python3` and no `python` unless python-is-python3 is installed; a "
                "virtual environment's programs are on PATH only where its bin/ is; a script's `#!` line names "
                "its interpreter by path")
    return (f"exited with code 126, the shell's code for a command found but not run{named}: it is not "
            "executable, is a folder, or is built for another machine",
            "check the file: `chmod +x` a script the task runs by its path (a file copied or mounted from a "
            "host can lose its execute bit), or run it through its interpreter (`python3 train.py`, `sh "
            "run.sh`); a binary for another CPU (arm64 on amd64) says `exec format error`")
