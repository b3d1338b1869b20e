"""`make soak`: SOAK runs with a random fault each (make chaos's, faults/chaos.py), and how they
ended: survived, ended cleanly or hung (or not injected: never survived, and the soak fails), with
the worst detection and recovery times.

    make soak SOAK=20
"""

from __future__ import annotations

import random

from tflab import backends, console
from tflab.core import cluster, runfolder
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import registry
from tflab.faults.chaos import NOT_INJECTED, Chaos
from tflab.supervisor import preemption, runner

OUTCOMES = ("survived", "ended cleanly", "hung", NOT_INJECTED)  # what a trial's chaos section says, faults/chaos.py


def soak(settings: Settings) -> int:
    """SOAK random scenarios, one run each, in runs/<RUN>/; prints the counts and worst times."""
    folder = runfolder.planned(settings)
    registry.check_backend(settings)
    if settings.epochs < 2:
        raise LabError(f"EPOCHS={settings.epochs} is not allowed with make soak: expected 2 or more (each fault "
                       "comes after one of the first EPOCHS-1 epochs, with training left)")
    rng = random.Random(settings.seed)
    tasks = cluster.build(settings).tasks
    workers = [t for t in tasks if t.startswith("worker-")] or tasks
    trials = []
    for index in range(settings.soak):
        scenario = rng.choice(list(registry.FAULTS))
        fault = registry.FAULTS[scenario]
        heal = "never" if fault.lasting and rng.random() < 0.25 else str(rng.choice([2, 5, 15, 30]))
        target, at = rng.choice(workers), f"epoch:{rng.randint(1, settings.epochs - 1)}"
        trial = settings.replace(runs_dir=str(folder), run=f"{index + 1:03d}-{scenario}", scenario=scenario,
                                 target=target, at=at, heal=heal if fault.heals else "5",
                                 verdict="off",  # a twin per trial would double the soak; a cached one is used
                                 **fault.drawn(rng, settings))
        Chaos(trial).check(trial)  # every trial checked before the soak's folder is written
        trials.append(trial)
    backends.check_engine(settings)
    runfolder.make(folder, link_latest=True)
    results = []
    for index, trial in enumerate(trials):
        console.say(f"--- soak {index + 1} of {settings.soak}: {Chaos(trial).fault_words()}")
        runner.up(trial, link_latest=False, observer=Chaos(trial))
        chaos = Summary.read(folder / trial.run).chaos
        if chaos is None:  # a summary written by hand, or by another version
            raise LabError(f"{folder / trial.run}: its summary.json has no chaos record, which every soak run writes")
        results.append(chaos)
    counts = {outcome: sum(r["outcome"] == outcome for r in results) for outcome in OUTCOMES}
    detection = [r["detection_seconds"] for r in results if r["detection_seconds"] is not None]
    recovery = [r["recovery_seconds"] for r in results if r["recovery_seconds"] is not None]
    missed = f", {NOT_INJECTED} {counts[NOT_INJECTED]}" if counts[NOT_INJECTED] else ""
    lines = [f"soak of {len(results)}: survived {counts['survived']}, ended cleanly {counts['ended cleanly']}, "
             f"hung {counts['hung']}{missed}",
             f"max detection {max(detection):.1f} s over {len(detection)} failures" if detection else "no failures",
             f"max recovery {max(recovery):.1f} s over {len(recovery)} recoveries" if recovery else "no recoveries"]
    lines += [f"  {r['scenario']:<10} {r['target']:<9} {r['at']:<8} "
              f"heal {r['heal'] if healed(r['scenario']) else '-':<6} -> {r['outcome']}"
              f"{': ' + r['not_injected'] if r.get('not_injected') else ''}"
              f" (restarts {r['restarts']}, detection {fmt(r['detection_seconds'])}, "
              f"recovery {fmt(r['recovery_seconds'])})"
              + "".join(f"\n    {preemption.result_line(p)}" for p in preemptions_of(r)) for r in results]
    lost = [p["steps_lost"] for r in results for p in preemptions_of(r) if isinstance(p.get("steps_lost"), int)]
    if lost:
        lines.insert(3, f"max steps lost {max(lost)} over {len(lost)} preemptions")
    print("\n".join(lines))
    runfolder.write_whole(folder / "soak.txt", "\n".join(lines) + "\n")
    runfolder.write_json(folder / "soak.json", {"counts": counts, "runs": results})
    # A trial whose fault never landed tested nothing: the soak fails, as make chaos does.
    return 0 if counts["hung"] == 0 and counts[NOT_INJECTED] == 0 else 1


def healed(scenario: str) -> bool:
    """Whether HEAL applies to a scenario (a run's summary names it: one it ran)."""
    fault = registry.FAULTS.get(scenario)
    return fault is not None and fault.heals


def preemptions_of(result: dict) -> list[dict]:
    """A chaos section's preemptions (SCENARIO=preempt), as summary.json has them."""
    found = result.get("preemptions")
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []


def fmt(seconds) -> str:
    return f"{seconds:.1f} s" if seconds is not None else "-"
