"""The lock of one TF line x one Keras release (KERAS=3.12, nightly): requirements/keras/<tf>-<keras>.txt,
written by tools/lock.py (the lab never asks PyPI at run time), read here. Stdlib only.

A Keras release is a thin layer on the TF line's packages image, not an image of its own: its lock
holds only what differs from the TF line's lock (the keras or keras-nightly wheel, and whatever of
its dependencies pip had to move), with the sha256 of each wheel, and names the Keras package the TF
line brought so it is uninstalled first (`keras` and `keras-nightly` both install `keras/`). pip
resolved the pair as a whole (tensorflow-cpu==R and keras==K, with the TF line's lock as
constraints), so a pair that cannot go together is a lock that says so, with pip's reason:

    # layers on: requirements/trainer.txt sha256:<of that file>
    # removes: keras
    keras==3.12.4 --hash=sha256:...

    # not installable: tensorflow-cpu 2.21.0 depends on keras>=3.12.0

A lock is read as a file anyone could have written: bounded, each line checked, the file it layers
on named exactly and unchanged since (else: lock it again).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from tflab.core import versions
from tflab.home import LAB_HOME

KERAS_LOCKS = LAB_HOME / "requirements/keras"
LAYERS_ON, REMOVES, NOT_INSTALLABLE = "# layers on: ", "# removes: ", "# not installable: "
MAX_BYTES = 64 * 1024
PIN = re.compile(r"([a-z0-9][a-z0-9.-]*)==([0-9][0-9a-z.+]*) --hash=sha256:([0-9a-f]{64})")
REASON = re.compile(r"[ -~]{1,500}")  # one line of printable ASCII: pip's words


class LockError(ValueError):
    """A lock file that is missing, stale or not one the lab wrote: one line saying which and what to do."""


@dataclass(frozen=True)
class KerasLock:
    tf: str  # 2.21 (the lab's own line for TF empty)
    keras: str  # 3.12 | nightly
    path: Path
    parent: Path  # the TF line's lock it layers on
    pins: tuple[str, ...] = ()  # name==version --hash=sha256:..., what the layer installs
    removes: tuple[str, ...] = ()  # the Keras package (keras, keras-nightly) the layer removes first
    not_installable: str | None = None  # pip's reason, where pip cannot install the pair

    @property
    def empty(self) -> bool:
        """The TF line already has this very release: no layer at all."""
        return not self.pins and not self.removes


def parent_lock(tf: str) -> Path:
    """The lock of the TF line a Keras layer goes on: the lab's own (requirements/trainer.txt) for
    2.21, else requirements/tf/<minor>.txt."""
    tf = tf or versions.DEFAULT
    return LAB_HOME / ("requirements/trainer.txt" if tf == versions.DEFAULT else f"requirements/tf/{tf}.txt")


def lock_path(tf: str, keras: str) -> Path:
    return KERAS_LOCKS / f"{tf or versions.DEFAULT}-{keras}.txt"


def relative(path: Path) -> str:
    return str(path.relative_to(LAB_HOME))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def relock_hint(tf: str, keras: str) -> str:
    return f"PYTHONPATH=scripts python3 -m tflab.tools.lock --keras {keras} {tf or versions.DEFAULT}"


def read(tf: str, keras: str) -> KerasLock:
    """The lock of TF x KERAS (a release), checked; LockError naming the file and what to do."""
    tf = tf or versions.DEFAULT
    path, parent = lock_path(tf, keras), parent_lock(tf)
    where = relative(path)
    try:
        raw = path.read_bytes()[:MAX_BYTES + 1]
    except FileNotFoundError:
        raise LockError(f"TF={versions.label(tf)} KERAS={keras} has no lock file ({where}); write it with: "
                        f"{relock_hint(tf, keras)}") from None
    except OSError as error:
        raise LockError(f"{where} cannot be read: {error.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise LockError(f"{where} is not a lock the lab wrote: over {MAX_BYTES} bytes")
    try:
        lines = raw.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise LockError(f"{where} is not a lock the lab wrote: not ASCII") from None
    pins, removes, layers_on, not_installable = [], [], None, None
    for number, line in enumerate(lines, 1):
        bad = f"{where} is not a lock the lab wrote: line {number} "
        if line.startswith(LAYERS_ON):
            layers_on = line[len(LAYERS_ON):]
        elif line.startswith(REMOVES):
            names = line[len(REMOVES):].split()
            if not all(name in versions.KERAS_DISTRIBUTIONS for name in names):
                raise LockError(bad + "names something that is not a Keras package "
                                f"({', '.join(versions.KERAS_DISTRIBUTIONS)})")
            removes += names
        elif line.startswith(NOT_INSTALLABLE):
            reason = line[len(NOT_INSTALLABLE):]
            if not REASON.fullmatch(reason):
                raise LockError(bad + "gives no reason on one line")
            not_installable = reason
        elif line.startswith("#") or not line.strip():
            continue
        elif PIN.fullmatch(line):
            pins.append(line)
        else:
            raise LockError(bad + "is not name==version --hash=sha256:<64 hex digits>")
    expected = f"{relative(parent)} sha256:{sha256(parent)}"
    if layers_on is None or layers_on.split(" ")[0] != relative(parent):
        raise LockError(f"{where} is not a lock the lab wrote: it does not say it layers on {relative(parent)}")
    if layers_on != expected:
        raise LockError(f"{where} was locked against another {relative(parent)} than this one; lock it again: "
                        f"{relock_hint(tf, keras)}")
    if not_installable and (pins or removes):
        raise LockError(f"{where} is not a lock the lab wrote: it both installs and says it cannot")
    return KerasLock(tf, keras, path, parent, tuple(pins), tuple(removes), not_installable)
