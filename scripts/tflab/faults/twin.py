"""The undisturbed twin of a make chaos run: the same settings without the fault, for the verdict
(faults/verdict.py) to compare the run's end with.

    make chaos SCENARIO=kill                      # VERDICT=auto: runs the twin once, then reuses it
    make chaos SCENARIO=kill TWIN=20261206-120000-ab12   # an undisturbed run of the same settings

The twin is RUNS_DIR/twin-<key>, key a digest of the settings that shape the training (every one
but the fault's own, those read by no `make up`, and IGNORED, which change no step), of a
SCRIPT's content and its folder's and DATA's listings (each file's path, size and change time:
an edited module or data file makes another twin), and of the image the run ran (its tag names
its inputs' digest; BACKEND=local's: the lab's code). A second chaos run of the same settings on
the same image reuses it. TWIN= names any finished run instead; its settings are checked before
the run, its image cannot be.

VERDICT=auto runs a missing twin only after a run that finished ok: only to tell equivalent
from lossy is a twin needed; a failed, hung or corrupt run is judged from its own records. So a
chaos test in CI that keeps VERDICT=off (or names its reference run as TWIN) costs no second run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from tflab import console
from tflab.core import foreign, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import verdict
from tflab.supervisor import runner

# Settings that change no training step: where it is written, how long the lab waits, which CLI,
# and the verdict's own.
IGNORED = ("run", "runs_dir", "timeout", "stall", "peer_timeout", "compose", "verdict", "twin", "force")
LISTED_MOST = 10_000  # entries of a folder's listing in the key; past them, "and more": a folder that big is data
SKIPPED = {"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints"}  # no training reads them
CODE = Path(__file__).resolve().parents[1]  # the tflab package: BACKEND=local runs it as it is


def fault_only() -> tuple[str, ...]:
    """The settings no `make up` reads: the fault's (SCENARIO, AT, TARGET, HEAL, NOTICE, ...)."""
    return tuple(f.name for f in dataclasses.fields(Settings) if "up" not in f.metadata.get("commands", ()))


def ignored() -> tuple[str, ...]:
    return IGNORED + fault_only()


def image_of(backend) -> str:
    """What ran the run's tasks: its image's tag (which names its inputs' digest), or for local
    processes a digest of the lab's own code."""
    image = getattr(backend, "image", "")
    if isinstance(image, str) and image:
        return image
    digest = hashlib.sha256()
    for path in sorted(CODE.rglob("*.py")):
        digest.update(str(path.relative_to(CODE)).encode() + b"\0" + path.read_bytes())
    return f"local:{digest.hexdigest()[:16]}"


def key(settings: Settings, image: str) -> str:
    shaping = {name: value for name, value in settings.to_dict().items() if name not in ignored()}
    return hashlib.sha256(json.dumps([shaping, image, script_digest(settings), folders_digest(settings)],
                                     sort_keys=True, default=str).encode()).hexdigest()[:16]


def script_digest(settings: Settings) -> str:
    """A SCRIPT's content: edited, its twin is another (the image holds the lab's code, not the
    script's)."""
    if not settings.script:
        return ""
    try:
        return hashlib.sha256(foreign.read_bytes(Path(settings.script), foreign.MAX_LOG_BYTES)).hexdigest()
    except (OSError, ForeignFile) as error:
        return f"unreadable: {error}"


def folders_digest(settings: Settings) -> str:
    """What else a SCRIPT's tasks read: its folder (mounted whole: its modules) and DATA, each as
    a listing of path, size and change time, so that an edited module or data file has another
    twin without the lab reading a data set's bytes. The runs folder, where it lies inside, is
    left out (it changes with every run), and so are caches and version control."""
    if not settings.script:
        return ""
    skip = runfolder.runs_dir(settings).resolve()
    folders = [Path(settings.script).resolve().parent] + ([Path(settings.data).resolve()] if settings.data else [])
    return hashlib.sha256("\n".join(listing(folder, skip) for folder in folders).encode()).hexdigest()


def listing(folder: Path, skip: Path) -> str:
    """One line an entry under `folder` (links not followed), at most LISTED_MOST, in walk order."""
    lines: list[str] = []
    for parent, folders, files in os.walk(folder):
        # the runs folder's own folders are runs (the twin's among them), wherever it lies
        folders[:] = [] if Path(parent) == skip else \
            sorted(name for name in folders if name not in SKIPPED and Path(parent, name) != skip)
        for name in sorted(files):
            try:
                status = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            lines.append(f"{os.path.relpath(os.path.join(parent, name), folder)!r} {status.st_size} "
                         f"{status.st_mtime_ns}")
            if len(lines) >= LISTED_MOST:
                return "\n".join(lines + ["and more"])
    return "\n".join(lines)


def twin_id(settings: Settings, image: str) -> str:
    return f"twin-{key(settings, image)}"


def twin_settings(settings: Settings, image: str) -> Settings:
    """The run's settings without its fault: each fault-only setting at its default, and no verdict."""
    defaults = {f.name: f.default for f in dataclasses.fields(Settings) if f.name in fault_only()}
    return settings.replace(**{**defaults, "run": twin_id(settings, image), "verdict": "off", "twin": ""})


def found(settings: Settings, image: str) -> tuple[Summary | None, str]:
    """(the twin's summary, "") where TWIN= names one or one is cached, else (None, why not)."""
    name = settings.twin or twin_id(settings, image)
    run_dir = runfolder.runs_dir(settings) / name
    try:
        return Summary.read(run_dir), ""
    except FileNotFoundError:
        if settings.twin:
            return None, f"TWIN={name} has no summary.json in {runfolder.runs_dir(settings)}"
        if run_dir.exists():
            return None, f"{name} (the twin of these settings) has no summary: it is running, or was stopped"
        if settings.verdict == "auto":
            return None, ("none yet for these settings on this image: make chaos runs it once after a run that "
                          "finished ok (VERDICT=auto)")
        return None, "none was run for these settings on this image (VERDICT=off runs none)"
    except (ForeignFile, OSError) as error:
        return None, f"{name}: {error}"


def check(settings: Settings) -> None:
    """TWIN= names a finished undisturbed run of these settings, less the fault's: refused in one
    line before anything starts, where it does not."""
    if not settings.twin:
        return
    found_twin, why = found(settings, "")
    why = why.replace(f"TWIN={settings.twin} ", "it ", 1)
    differs = why or ("it is a chaos run itself" if found_twin is not None and found_twin.chaos is not None else "")
    if found_twin is not None and not differs and not found_twin.ok:
        differs = f"it did not finish ok ({found_twin.outcome})"
    if found_twin is not None and not differs:
        differs = (replay_problem(settings, found_twin.settings) if settings.tfjob or settings.trainjob else
                   verdict.settings_problem(settings.to_dict(), found_twin.settings, ignored())) or ""
    if differs:
        raise LabError(f"TWIN={settings.twin} is not allowed: {differs}; expected a finished run of the same "
                       "settings without the fault, in RUNS_DIR (or leave TWIN out for the lab's own twin)")


def replay_problem(settings: Settings, theirs: object) -> str | None:
    """Why a run named as a replay's TWIN= replayed another manifest, or None. A replay records what
    its manifest says (tfjob.replay_settings), not the lab's defaults, so before the run only its
    manifest can be held to ours (ALLREDUCE_PROBE=(unset), not 0, refused every undisturbed replay);
    the verdict then compares the two replays' recorded settings (verdict.twin_problem)."""
    manifest = settings.tfjob or settings.trainjob
    given = theirs.get("tfjob") if isinstance(theirs, dict) else None
    if not isinstance(given, str) or not given:
        return "it is no replay (make chaos TFJOB= or TRAINJOB= compares a replay with a replay)"
    if Path(given).resolve() != Path(manifest).resolve():
        return f"it replayed {foreign.shown(given, 200)}, not {manifest}"
    return None


def wanted(settings: Settings, summary: Summary) -> bool:
    """Whether make chaos runs the twin: VERDICT=auto, no TWIN=, the lab's own run (a replayed job
    is run by replay/, not here), finished ok (the only verdict a twin decides)."""
    return (settings.verdict == "auto" and not settings.twin and not settings.tfjob and not settings.trainjob
            and summary.ok and summary.chaos is not None and summary.chaos.get("injected") is True)


def run(settings: Settings, image: str) -> tuple[Summary | None, str]:
    """Runs the twin (its own table printed as any run's), then reads it; (None, why) where it failed."""
    twin = twin_settings(settings, image)
    console.say(f"chaos: running the undisturbed twin {twin.run} for the verdict (VERDICT=off skips it)")
    try:
        runner.up(twin, link_latest=False)
    except LabError as error:
        return None, f"its run {twin.run} could not be made: {error}"
    return found(settings, image)
