"""`make migrate TFJOB=job.yaml`: a TFJob and the Trainer v2 TrainJob that stands for it, replayed one
after the other under the same settings and the same fault, and what differs, with the field of
either manifest that makes it differ.

    make migrate TFJOB=runs/k8s-mw2/tfjob.yaml
    make migrate TFJOB=job.yaml SCENARIO=kill TARGET=worker-1 AT=epoch:1

The TrainJob and its runtime are what `tflab k8s TFJOB=` writes (k8s/fromtfjob.py's one
conversion). Each replay is what `tflab up TFJOB=` / `TRAINJOB=` runs, or, with SCENARIO given,
what `tflab chaos` runs (faults/chaos.py's Chaos, the same SCENARIO, TARGET, AT and HEAL for both);
without SCENARIO there is no fault. Everything is checked (the TFJob, its TrainJob as its replay
would check it, the fault against both jobs' replicas, the engine and the images) before the
folder is made. The folder, RUNS_DIR/<RUN>/ (RUN empty: migrate-<id>):

    trainjob.yaml   the TrainJob and its runtime
    tfjob/          the TFJob's replay, a run folder as `make up TFJOB=` writes
    trainjob/       the TrainJob's replay
    migrate.json    the rows (reports/migratediff.py) and what did not carry over
    migrate.md      the same as a table

The table is printed too. Exit status: 0 where both jobs ended alike (the `end` row is the same),
1 where they did not or a fault never landed in one of them.
"""

from __future__ import annotations

from pathlib import Path

from tflab.console import display_path, say
from tflab.core import beneath, foreign, runfolder
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.k8s import fromtfjob, writer
from tflab.reports.migratediff import MigrateError, Side, counted, differences, markdown, table

MIGRATE_JSON = "migrate.json"
MIGRATE_MD = "migrate.md"
MIGRATE_VERSION = 1
KINDS = {"tfjob": "TFJob", "trainjob": "TrainJob"}  # each replay's run folder in the migrate folder -> its kind
FAULT_SETTINGS = ("TARGET", "AT", "HEAL")  # a fault's moment and target: nothing without SCENARIO
OWN_VOLUMES = ("volumes/tflab-hooks/",)  # what the lab writes into a replay's volumes, not the job


def refuse(settings: Settings, given: dict[str, str]) -> None:
    """Before anything is read: a TFJob to migrate, and no fault setting without its fault."""
    if not settings.tfjob:
        raise LabError("make migrate needs TFJOB=<a TFJob manifest> (kubeflow.org/v1, Worker replicas): the job "
                       "to replay as it is and as the TrainJob `make k8s TFJOB=` writes")
    for name in FAULT_SETTINGS:
        if name in given and "SCENARIO" not in given:
            raise LabError(f"{name}={given[name]} applies only with SCENARIO=<a fault> (make migrate injects none "
                           f"unless SCENARIO is given); give SCENARIO, or leave {name} out")


def migrate(settings: Settings, given: dict[str, str] | None = None) -> int:
    given = dict(given or {})
    refuse(settings, given)
    fault = "SCENARIO" in given
    conversion = fromtfjob.convert(settings)  # the TFJob checked whole, and turned
    folder = runfolder.planned(settings.replace(run=settings.run or f"migrate-{runfolder.new_run_id()}"))
    path = folder / fromtfjob.TRAINJOB_FILE
    trainjob_plan = conversion.trainjob_plan(path, settings)
    old = settings.replace(runs_dir=str(folder), run="tfjob")
    if fault:  # the fault as `make chaos` checks it, against either job's replicas
        from tflab.faults.chaos import Chaos

        for plan in (conversion.plan, trainjob_plan):
            Chaos(old, plan.as_cluster()).check(old)
    check_engine(settings, conversion.plan, trainjob_plan)
    runfolder.make(folder, link_latest=True)
    writer.write_manifest(path, conversion.text)
    say(f"wrote {display_path(path)}: TrainJob {trainjob_plan.name} and its runtime, from TFJob {conversion.plan.name}")
    say("not carried over: " + ("; ".join(conversion.said) if conversion.said else "nothing"))
    new = settings.replace(runs_dir=str(folder), run="trainjob", tfjob="", trainjob=str(path))
    codes = {}
    for number, (name, side) in enumerate((("tfjob", old), ("trainjob", new)), 1):
        say(f"--- migrate {folder.name}: the {KINDS[name]}'s replay ({number} of 2)")
        codes[name] = replayed(side, fault)
    sides = [side_of(folder / name, documents) for name, documents in (
        ("tfjob", conversion.tfjob_documents), ("trainjob", conversion.documents))]
    rows = differences(*sides)
    same_end = next(r.same for r in rows if r.what == "end")
    record = {"version": MIGRATE_VERSION, "run": folder.name, "tfjob": str(conversion.plan.path),
              "trainjob": fromtfjob.TRAINJOB_FILE, "runs": dict(KINDS),
              "fault": {"scenario": settings.scenario, "target": settings.target, "at": settings.at,
                        "heal": settings.heal} if fault else None,
              "not_carried_over": list(conversion.said), "same_end": same_end, "summary": counted(rows),
              "rows": [r.to_dict() for r in rows]}
    runfolder.write_json(folder / MIGRATE_JSON, record)
    runfolder.write_whole(folder / MIGRATE_MD, markdown(rows, f"Migrate {folder.name}: TFJob "
                                                              f"{conversion.plan.name} and its TrainJob"))
    print(table(rows))
    say(f"wrote {display_path(folder / MIGRATE_JSON)}, {display_path(folder / MIGRATE_MD)}")
    say(counted(rows))
    missed = [name for name, code in codes.items() if fault and code and not_landed(folder / name)]
    if missed:
        say(f"the fault never landed in the {' and the '.join(KINDS[name] for name in missed)}'s replay")
    return 0 if same_end and not missed else 1


def check_engine(settings: Settings, *plans) -> None:
    """The engine, Compose and every image either replay needs, before the folder is made."""
    from tflab.backends import compose
    from tflab.engine import docker
    from tflab.replay.images import check_images

    docker.check()
    compose.find_compose(settings.compose)
    for plan in plans:
        check_images(plan)


def replayed(settings: Settings, fault: bool) -> int:
    """One replay, as `make up TFJOB=`/`TRAINJOB=` runs it, or with the fault as `make chaos` does."""
    from tflab import replay
    from tflab.faults import chaos

    if not fault:
        return replay.up(settings, {}, link_latest=False)
    made: list[chaos.Chaos] = []

    def observer(the_cluster=None) -> chaos.Chaos:
        made.append(chaos.Chaos(settings, the_cluster))
        return made[-1]

    code = replay.up(settings, {}, observer=observer, link_latest=False)
    return chaos.ended(made[-1] if made else None, code)


def not_landed(run_dir: Path) -> bool:
    try:
        summary = Summary.read(run_dir)
    except (FileNotFoundError, LabError):
        return False
    return bool(summary.chaos and summary.chaos.get("outcome") == "not injected")


def side_of(run_dir: Path, documents: list) -> Side:
    """A replay's records, read as hostile: its summary (the typed reader), config.json's
    TF_CONFIGs, and the files its replicas wrote into its volumes."""
    try:
        summary = Summary.read(run_dir)
        config = runfolder.read_config(run_dir)
    except FileNotFoundError:
        raise MigrateError(f"{display_path(run_dir)} has no summary.json or config.json: its replay did not run to "
                           "its end") from None
    return Side(summary, documents, config.get("tf_config"), written(run_dir))


def written(run_dir: Path) -> list[str]:
    """The regular files under the run's volumes/, no link followed, bounded; the lab's own hooks left out."""
    try:
        with beneath.Beneath(run_dir) as folder:
            found = folder.walk("volumes", "")
    except (OSError, foreign.ForeignFile):
        return []
    return [path for path in found if not path.startswith(OWN_VOLUMES)]
