"""A replay's volumes and the lab's hooks in its replicas, as folders of the run folder
(volumes/): ConfigMaps as read-only files, a claim as a shared folder (or CLAIMS's host folder),
the sitecustomize that loads the hooks (trainer/replayhooks.py) with their config and a log
folder each replica writes; and each replica's bind mounts of them. Every host path comes from
volume_path (manifest.path_under: no link followed); nothing is overwritten."""

from __future__ import annotations

import os
from pathlib import Path

from tflab import home
from tflab.core import beneath, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.grammars import claim_folders
from tflab.core.settings import DATA_DIR, Settings
from tflab.k8s import manifest
from tflab.k8s.manifest import ManifestError
from tflab.k8s.pod import HOOKS, hooks_file
from tflab.k8s.tfjob import Plan
from tflab.trainer import replayhooks


def volume_path(run_dir: Path, relative: str) -> Path:
    """run_dir/volumes/<relative>: the one way write_volumes and render build a host path from
    the manifest's names (manifest.path_under: plain parts, no link, resolving under volumes/)."""
    root = run_dir / "volumes"
    try:
        root.mkdir(exist_ok=True)
    except OSError as error:
        raise ManifestError(f"cannot make {root}: {error.strerror or error}") from None
    if root.is_symlink() or os.path.realpath(root) != os.path.join(os.path.realpath(run_dir), "volumes"):
        raise ManifestError(f"{root} is a link; the run's volumes must be its own folder")
    return manifest.path_under(root, relative)


def host_folders(plan: Plan, settings: Settings | None) -> dict[str, tuple[str, bool]]:
    """The replay's volumes that are the host's, not the run's: claim -> (its folder, read-only),
    as CLAIMS gives them (never the manifest: it names claims, and a hostPath is refused). One
    line where CLAIMS names a claim no replica mounts."""
    given = claim_folders(settings.claims) if settings is not None else {}
    claims = {volume["claim"] for volume in plan.volumes.values() if "claim" in volume}
    for claim in given:
        if claim not in claims:
            raise LabError(f"CLAIMS names the claim {claim}, which no replica of {plan.setting}={plan.path} mounts; "
                           f"expected {', '.join(sorted(claims)) or f'no CLAIMS: the {plan.kind} mounts no claim'}")
    return given


def write_volumes(plan: Plan, run_dir: Path, settings: Settings | None = None) -> None:
    """ConfigMaps as read-only folders of files (volumes/configmaps/<name>/); each claim a folder
    (volumes/<claim>/) that every task mounting it shares, as a ReadWriteMany claim would be, where
    CLAIMS gives it none of the host's (host_folders).
    Every path comes from volume_path; a file is created, never followed or overwritten."""
    given = host_folders(plan, settings)
    for folder_name, volume in plan.volumes.items():
        if volume.get("claim") in given:
            continue
        folder = volume_path(run_dir, folder_name)
        try:
            folder.mkdir(exist_ok=True)
        except OSError as error:
            raise ManifestError(f"cannot make {folder}: {error.strerror or error}") from None
        if folder.is_symlink() or not folder.is_dir():
            raise ManifestError(f"{folder} is not a folder of the run's")
        if "claim" in volume:
            folder.chmod(0o777)  # whatever user the image runs as may write, as on a fresh volume
            continue
        data = plan.config_maps[volume["configMap"]]
        for item in volume["items"] or [{"key": key, "path": key} for key in data]:
            path = volume_path(run_dir, f"{folder_name}/{item['path']}")
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(descriptor, "w") as file:
                    file.write(data[item["key"]])
            except OSError as error:
                raise ManifestError(f"cannot write {path}: {error.strerror or error}") from None


# The lab's hooks in a replica's own Python (trainer/replayhooks.py says why a sitecustomize): this
# file, the lab's package and the hooks' config read-only, and a log folder of the replica's own.
SITE_FILE = """\
# Written by the lab for a TFJob replay (tflab up TFJOB=), first on PYTHONPATH: loads the lab's hooks
# (tflab/trainer/replayhooks.py), then the image's own sitecustomize. Read-only; the image is unchanged.
import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(_here))  # the lab's package, last: the image's own modules come first
try:
    from tflab.trainer import replayhooks
except Exception as error:
    print("tflab: the lab's hooks could not load, and the program runs on without them:", repr(error),
          file=sys.stderr)
else:
    replayhooks.start(_here)
"""


def write_hooks(plan: Plan, run_dir: Path, settings: Settings) -> None:
    """volumes/tflab-hooks/: site/sitecustomize.py, config.json (the settings the hooks read:
    AUDIT's), and one writable folder a replica for its events and its mark."""
    try:
        root = volume_path(run_dir, HOOKS)
        root.mkdir()
        (root / "site").mkdir()
        (root / "site" / "sitecustomize.py").write_text(SITE_FILE)
        runfolder.write_json(root / "config.json", {"settings": {"audit": settings.audit}, "cluster": plan.spec})
        for task in plan.tasks:
            (root / task.name).mkdir()
            (root / task.name).chmod(0o777)  # whatever user the image runs as writes its own events
    except OSError as error:
        raise ManifestError(f"cannot write the lab's hooks for the replay: {error.strerror or error}") from None


def hooks_service(run_dir: Path, task: str, python_path: str) -> tuple[list[str], dict[str, str]]:
    """A replica's mounts and environment for the hooks: PYTHONPATH our site folder first, then the
    manifest's or the image's own (python_path), which Compose's environment would otherwise hide."""
    root = volume_path(run_dir, HOOKS)
    at = replayhooks.ROOT
    mounts = [f"{root / 'site'}:{at}/site:ro", f"{home.PACKAGE}:{at}/tflab:ro",
              f"{root / 'config.json'}:{at}/{replayhooks.CONFIG}:ro", f"{root / task}:{at}/{replayhooks.LOG}"]
    path = ":".join(filter(None, [f"{replayhooks.ROOT}/site", python_path]))
    return mounts, {"PYTHONPATH": path, replayhooks.TASK_ENV: task}


def binds(plan: Plan, run_dir: Path, mounts: list, settings: Settings | None) -> list[str]:
    """A replica's bind mounts: the manifest's volumes from the run folder (volume_path), a claim
    CLAIMS gives a host folder from there (read-only where either says so), and DATA read-only at
    /lab/data. The one place a replay's host paths meet its mounts."""
    given = host_folders(plan, settings)
    found = []
    for folder, target, read_only in mounts:
        if folder in given:
            source, read_only = given[folder][0], read_only or given[folder][1]
        else:
            source = str(volume_path(run_dir, folder))
        found.append(f"{source}:{target}{':ro' if read_only else ''}")
    if settings is not None and settings.data:
        found.append(f"{settings.data}:{DATA_DIR}:ro")
    return found


def hooks_folder(run_dir: Path, task: str) -> Path:
    return volume_path(run_dir, f"{HOOKS}/{task}")


def hooks_mark(run_dir: Path, task: str) -> str:
    """The replica's mark (replayhooks.mark): hooked, failed: why, lab; '' where none was left."""
    try:
        text = beneath.read(run_dir, hooks_file(task, replayhooks.MARK), 4096).decode(errors="replace")
    except (OSError, ForeignFile):
        return ""
    return text.strip().splitlines()[0] if text.strip() else ""
