"""`tflab up TFJOB=...`: the replay of a TFJob (tfjob.py's Plan; `TRAINJOB=`, a Trainer v2 TrainJob that
trainjob.py translates into the same Plan) as a run of the lab's one
pipeline (runner.run): its replicas as one Compose project (stack.py's ReplayStack), watched from
outside (watcher.py's Watcher: each replica's start and end into <task>.jsonl), followed, restarted
and summarised as run.py's ReplayRun says where a TFJob differs from the lab's own run. tfjob.py
reads and plans; this package is what touches the engine (images.py: what the engine must hold)
and the run folder (volumes.py: the replay's volumes and the lab's hooks). Here: `up`, and what is
checked and said before anything starts. It sits above the supervisor, whose runner it drives, and
below faults/, reports/ and cli/, which start it; its stack is a compose.ComposeStack, a backend
that only the replay starts, so it lives here rather than under backends/.
"""

from __future__ import annotations

from pathlib import Path

from tflab import console
from tflab.backends import compose
from tflab.core import runfolder
from tflab.core.errors import LabError
from tflab.core.settings import DATA_DIR, Settings
from tflab.engine import docker
from tflab.k8s.tfjob import Plan, load, refuse_decided
from tflab.replay.images import check_images, image_configs
from tflab.replay.run import ReplayRun
from tflab.replay.stack import ReplayStack
from tflab.replay.volumes import host_folders
from tflab.supervisor import runner


def load_plan(settings: Settings) -> Plan:
    """TFJOB's plan, or TRAINJOB's (trainjob.py translates a TrainJob into the same plan)."""
    if settings.trainjob:
        from tflab.k8s import trainjob

        return trainjob.load(settings)
    return load(settings)


def up(settings: Settings, given: dict[str, str] | None = None, observer=None, recast=None,
       link_latest: bool = True) -> int:
    """`tflab up TFJOB=...`: checks everything, then runs the job (runner.run, as ReplayRun says)
    until its chief (or every worker) is done, restarting the whole job as its restart policy says;
    0 only if it succeeded. `given`: the settings the user gave (given_values), refused where the
    TFJob decides them. `recast`: make matrix's, Plan -> the plan of its cell (the cell's image)."""
    plan = load_plan(settings)
    if recast is not None:
        plan = recast(plan)
    refuse_decided(plan, given or {})
    watching = None
    if observer is not None:  # make chaos: its fault on the replicas, checked before anything else
        watching = observer(plan.as_cluster())
        watching.check(settings)
    run_dir = runfolder.planned(settings)
    docker.check()
    cli = compose.find_compose(settings.compose)
    check_images(plan)
    check_ways_in(plan, settings)
    console.say("not applied: " + ("; ".join(plan.not_applied) if plan.not_applied else "nothing"))
    for line in ways_in(plan, settings):
        console.say(line)
    images = image_configs(plan)
    said = as_root(plan, settings, images)
    if said:
        console.say(said)
    stack = ReplayStack(cli, run_dir, plan, settings, images)
    if watching is None:
        return runner.run(ReplayRun(plan, settings, stack, run_dir), link_latest)
    return runner.run(ReplayRun(plan, settings, stack, run_dir), link_latest, observer=watching)


def check_ways_in(plan: Plan, settings: Settings) -> None:
    """DATA's mount and CLAIMS's claims against the manifest's, before anything starts: one line each."""
    host_folders(plan, settings)
    if settings.data:
        for task in plan.tasks:
            for _, target, _ in task.service["x-mounts"]:
                if target == DATA_DIR or target.startswith(DATA_DIR + "/") or DATA_DIR.startswith(target + "/"):
                    raise LabError(f"DATA={settings.data} is mounted at {DATA_DIR}, where {task.name} already mounts "
                                   f"a volume of TFJOB={plan.path} ({target}); leave DATA out, or mount that volume "
                                   "elsewhere")
            for entry in task.service.get("tmpfs", []):
                target = entry.split(":", 1)[0]
                if target == DATA_DIR or DATA_DIR.startswith(target + "/") or target.startswith(DATA_DIR + "/"):
                    raise LabError(f"DATA={settings.data} is mounted at {DATA_DIR}, where {task.name} mounts an "
                                   f"emptyDir ({target}); leave DATA out, or mount the emptyDir elsewhere")


def ways_in(plan: Plan, settings: Settings) -> list[str]:
    """What the replay's replicas reach beyond each other, said before they start: the network,
    DATA and the claims' folders."""
    lines = ["network: the replicas may reach the internet (NETWORK=bridge), as a cluster's pods may"
             if settings.network == "bridge" else
             "network: the replicas reach each other only (NETWORK=internal); NETWORK=bridge lets them out, as a "
             "cluster's pods are"]
    if settings.data:
        lines.append(f"data: {console.display_path(Path(settings.data))} read-only at {DATA_DIR} in every replica "
                     "($TFLAB_DATA)")
    for claim, (folder, read_only) in host_folders(plan, settings).items():
        lines.append(f"claim {claim}: {console.display_path(Path(folder))}, "
                     f"{'read-only' if read_only else 'writable where the manifest mounts it so'} (CLAIMS)")
    return lines


def root_user(user) -> bool:
    """An image's Config.User as the engine runs it: none, 0 or root (with any group) is root."""
    return isinstance(user, str) and user.split(":", 1)[0] in ("", "0", "root")


def as_root(plan: Plan, settings: Settings, images: dict[str, dict]) -> str:
    """One line before a replay starts, where some replica will run as root (its pod's runAsUser:
    0, or else its image's user): what it can then write, and what keeps that from other host
    users (issue 41). '' where every replica runs as another user."""
    by_pod = [task.name for task in plan.tasks if str(task.service.get("user", "")).split(":", 1)[0] == "0"]
    by_image = [task.name for task in plan.tasks
                if "user" not in task.service and root_user(images.get(task.image, {}).get("User", ""))]
    if not by_pod and not by_image:
        return ""
    who = []
    if by_pod:
        who.append(f"{', '.join(by_pod)} (runAsUser: 0)")
    if by_image:
        who.append(f"{', '.join(by_image)} ({'its' if len(by_image) == 1 else 'their'} image's user)")
    given = host_folders(plan, settings)
    volumes = sorted({volume["claim"] for volume in plan.volumes.values()
                      if "claim" in volume and volume["claim"] not in given})
    reach = ["their hooks folders" + (f" and the claim volumes {', '.join(volumes)} in the run folder" if volumes
                                      else " in the run folder")]
    reach += [f"CLAIMS {claim} ({folder})" for claim, (folder, read_only) in given.items() if not read_only]
    return (f"{' and '.join(who)} run as root: they can write {', '.join(reach)} as root; the run folder (0700) and "
            "a writable CLAIMS folder are closed to other users of this host, and set-ID bits are stripped from "
            "them at the end")
