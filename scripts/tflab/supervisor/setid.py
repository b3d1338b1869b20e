"""Set-ID bits taken away from what a run's tasks wrote, before the run is handed back (issue 41).

    lines = strip_run(run_dir, outside={"CLAIMS data": Path("/srv/claims/data")}, image="tflab-trainer:latest")

A task (uid 1000) or a replica (root, where its image's user or its pod says so) can leave a
set-user-ID copy of a shell in what it may write: its tasks' space, a replay's hooks folder and
claim volumes (all under the run folder), a writable CLAIMS host folder. The run folder is closed
to other users (runfolder.PRIVATE); this is the second layer: every set-ID bit there is removed
once the containers are gone (runner.run's teardown, and `tflab down` for a run whose lab died),
through setidbits.strip_setid (no link followed). Where the lab is not root and a root replica's
file is not its to change (EPERM), a one-shot container of the run's image does it: no network,
no capability but FOWNER (and DAC_READ_SEARCH, to enter a root replica's 0700 folders), user 0,
only that folder mounted; a link there resolves inside the container, never on the host. What was
found is recorded in the lab's space (setid.json) and said in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from tflab.core import hostfiles, runfolder, setidbits
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.grammars import claim_folders, claims
from tflab.core.settings import SettingsError
from tflab.engine import docker

SHOWN = 3  # entries named in the line; setid.json holds them all


def strip_tree(folder: Path, image: str = "") -> setidbits.Stripping:
    """One tree's walk, and the container's where the walk left a bit it could not remove."""
    result = setidbits.strip_setid(folder)
    if (result.left or result.unentered) and image and os.geteuid() != 0:
        done = docker.strip_setid_in(image, str(folder))
        if done.returncode == 0:
            again = setidbits.strip_setid(folder)
            still = {entry.path for entry in again.left}
            result.found = [setidbits.SetId(e.path, e.uid, e.mode, e.path not in still,
                                            e.why if e.path in still else "") for e in result.found]
            result.found += [e for e in again.found if e.path not in {f.path for f in result.found}]
            result.unentered = again.unentered
    return result


def strip_run(run_dir: Path, outside: dict[str, Path] | None = None, image: str = "") -> list[str]:
    """Strips the run folder and each writable host folder of `outside` (its name in the lines ->
    its path), records what was found in setid.json (the lab's space) and returns the lines to
    say: none where nothing had a set-ID bit. Never raises for what it finds."""
    trees = {"": Path(run_dir), **{name: Path(path) for name, path in (outside or {}).items()}}
    record, found, unfinished = {}, [], []
    for name, folder in trees.items():
        result = strip_tree(folder, image)
        prefix = f"{name}:" if name else ""
        found += [(f"{prefix}{entry.path}", entry) for entry in result.found]
        if not result.complete:
            unfinished.append((name, folder, result))
        record[name or "run"] = {"folder": str(folder), "looked_at": result.looked_at,
                                 "found": [entry.to_dict() for entry in result.found],
                                 "unentered": result.unentered, "skipped": result.skipped,
                                 "skipped_more": result.skipped_more}
    try:
        runfolder.write_lab_json(run_dir, runfolder.SETID, record)
    except (OSError, LabError, ForeignFile):
        pass  # the lines below still say it; a full disk is said by the run's own summary
    return lines(found) + [unfinished_line(*tree) for tree in unfinished]


def lines(found: list[tuple[str, setidbits.SetId]]) -> list[str]:
    stripped = [(path, entry) for path, entry in found if entry.stripped]
    if not stripped:
        return []
    files = "file" if len(stripped) == 1 else "files"
    bits = "bit" if len(stripped) == 1 else "bits"
    named = ", ".join(f"{path} (uid {entry.uid}, was {entry.mode & 0o7777:o})" for path, entry in stripped[:SHOWN])
    more = f" and {len(stripped) - SHOWN} more ({runfolder.SETID})" if len(stripped) > SHOWN else ""
    return [f"stripped the set-ID {bits} from {len(stripped)} {files} a task wrote: {named}{more}"]


def unfinished_line(name: str, folder: Path, result: setidbits.Stripping) -> str:
    """One tree's line where its check is not complete: what keeps a set-ID bit, what was not
    looked at (a bound's subtree, a folder it could not enter), and what in truth keeps the other
    users of this host from it, looked at now: the folder on its path that is closed to them (the
    run folder, 0700, for its own tree; for a CLAIMS folder whichever the user closed), or that
    none is."""
    prefix = f"{name}:" if name else ""
    left = [f"{prefix}{entry.path} (uid {entry.uid}, mode {entry.mode & 0o7777:o}: {entry.why})"
            for entry in result.left]
    unseen = [f"{prefix}{where}" for where in result.unentered + result.skipped]
    unseen_count = len(unseen) + result.skipped_more
    said = []
    if left:
        more = f" and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
        said.append(f"could not strip set-ID bits from {'; '.join(left[:SHOWN])}{more}")
    if unseen:
        more = f" and {unseen_count - SHOWN} more ({runfolder.SETID})" if unseen_count > SHOWN else ""
        said.append(f"did not look for set-ID bits in {'; '.join(unseen[:SHOWN])}{more}")
    where = "the run folder" if not name else f"{name} ({folder})"
    closed = hostfiles.closed_by(Path(folder).absolute())
    if closed is None:
        guard = (f"other users of this host can reach {where}: no folder on its path is closed to them, so "
                 "remove these now")
    else:
        closing, mode = closed
        why = f"mode {mode:o}" if closing == Path(folder).absolute() else f"{closing} is {mode:o}, closed to them"
        guard = f"no other user of this host can reach {where} ({why}); remove these before you share or open it up"
    return f"{'; '.join(said)}: {guard}"


def look_run(run_dir: Path, why: str) -> list[str]:
    """`tflab down`'s look at a folder that seems a run whose lab died, but which the lab cannot
    prove it claimed (`why`, runowner.unproven): nothing is changed in it, nor in a CLAIMS folder
    its config.json may name; what has a set-ID bit, or was not looked at, is said."""
    result = setidbits.strip_setid(Path(run_dir), look_only=True)
    if not result.found and not result.unentered and not result.skipped:
        return []
    named = [f"{entry.path} (uid {entry.uid}, mode {entry.mode & 0o7777:o})" for entry in result.found]
    named += [f"{where}, not looked at" for where in result.unentered + result.skipped]
    more = f" and {len(named) - SHOWN} more" if len(named) > SHOWN else ""
    return [f"set-ID bits left as they are in {'; '.join(named[:SHOWN])}{more}: the lab cannot prove it claimed this "
            f"folder ({why}), so it changes nothing there; check them (find {run_dir} -perm /6000), then chmod "
            "u-s,g-s what should not keep its bit"]


def outside_of(run_dir: Path) -> dict[str, Path]:
    """A finished run's writable CLAIMS host folders, from its config.json (the lab's space), for
    `tflab down` to strip where the run's lab died before it could; none where it names none."""
    try:
        raw = runfolder.read_config(run_dir).get("settings", {}).get("claims") or ""
        given = claim_folders(claims("CLAIMS", raw)) if isinstance(raw, str) and raw else {}
    except (OSError, ValueError, ForeignFile, SettingsError, AttributeError):
        return {}
    return {f"CLAIMS {claim}": Path(folder) for claim, (folder, read_only) in given.items()
            if not read_only and os.path.isabs(folder)}


def why_lines(run_dir: Path) -> list[str]:
    """`tflab why`'s finding, from setid.json (read as foreign: a record the lab did not write, or
    none, is no finding): what the run's tasks left with a set-ID bit, and whether it is gone."""
    try:
        record = runfolder.read_lab_json(run_dir, runfolder.SETID)
    except (OSError, ValueError, ForeignFile):
        return []
    found = []
    for name, tree in (record.items() if isinstance(record, dict) else []):
        entries = tree.get("found") if isinstance(tree, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                prefix = "" if name == "run" else f"{name}:"
                state = "stripped" if entry.get("stripped") is True else "NOT stripped"
                found.append(f"{prefix}{entry['path']} (uid {entry.get('uid')}, was {entry.get('mode')}, {state})")
    if not found:
        return []
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return [f"finding: set-ID programs a task left: {', '.join(found[:SHOWN])}{more} ({runfolder.SETID}); the run "
            "folder is closed to other users of this host; a task that plants them is worth reading"]
