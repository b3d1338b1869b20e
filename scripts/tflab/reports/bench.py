"""`make bench`: the lab's own overhead and the multi-worker step, measured side by side in one go
(BENCH=stall measures the stall watch instead: reports/stallbench.py).

Prints one line per figure, ratios first, and keeps them in runs/<RUN>/bench.txt and bench.json
beside the runs they come from. Figures, not assertions: the machines are shared and noisy, so
a ratio of two runs made minutes apart on the same machine is the figure worth reading.
"""

from __future__ import annotations

import time
from pathlib import Path

from tflab import console, images
from tflab.backends import compose, local
from tflab.core import runfolder
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary
from tflab.core.schema import by_event
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.reports import imagebench
from tflab.supervisor import runner

ALLREDUCE_CALLS = 200
FAST = dict(loop="custom", steps_per_execution=16)  # the lab's quickest step: its own loop, 16 steps a call


def chief_end(run_dir: Path) -> dict:
    records = runfolder.events(run_dir, runfolder.read_config(run_dir)["tasks"][0])
    end = (by_event(records, "end") or [{}])[-1]
    probe = (by_event(records, "allreduce") or [{}])[-1]
    return {**end, "allreduce_seconds": probe.get("median_seconds"), "allreduce_floats": probe.get("floats")}


PHASES = ("start", "imports", "rendezvous", "first step")


def audit_figures(run_dir: Path) -> dict:
    """The chief's mean step over epochs 2 on (sampled steps and the others, where the median is
    the others'), and how many steps of an epoch the audit sampled (0: AUDIT=off)."""
    records = runfolder.events(run_dir, runfolder.read_config(run_dir)["tasks"][0])
    later = [r for r in by_event(records, "epoch") if r.get("epoch", 0) > 1]
    steps = sum(r["steps"] for r in later)
    sampled = [r["step"] for r in by_event(records, "audit_batch")]
    return {"mean_step_seconds": sum(r["seconds"] for r in later) / steps if steps else None,
            "sampled_steps": max(sampled, default=0)}


def phases(run_dir: Path, launched_at: float) -> dict[str, float]:
    """Where the chief's time to its first step went, from its own log: the lab starting its task
    (container or process) until the trainer's first line ran; its imports and data; the
    rendezvous with its peers; the first step itself (tracing included)."""
    records = runfolder.events(run_dir, runfolder.read_config(run_dir)["tasks"][0])
    start, ready, end = (by_event(records, name)[-1] for name in ("start", "cluster_ready", "end"))
    began = ready["time"] - ready["seconds"]  # train.STARTED, the trainer's first line
    return {"start": began - launched_at, "imports": start["time"] - began,
            "rendezvous": ready["time"] - start["time"], "first step": end["first_step_at"] - ready["time"]}


def last_epoch_memory(run_dir: Path, summary: Summary) -> dict[str, list[int]]:
    """Each task's resident, proportional and unique sizes at its last epoch's end (the fields its
    epoch events carry, where it could read them)."""
    memory: dict[str, list[int]] = {"rss_bytes": [], "pss_bytes": [], "uss_bytes": []}
    for row in summary.tasks:
        last = (by_event(runfolder.events(run_dir, row.task), "epoch") or [{}])[-1]
        for field, values in memory.items():
            if isinstance(last.get(field), int):
                values.append(last[field])
    return memory


def memory_line(eight: dict, total: int | None) -> str:
    """What a task of the WORKERS=8 run costs, and the largest WORKERS that fits this engine at that
    cost: each task's own (unique) memory, and once the pages they share (resident - unique)."""
    memory = eight.get("memory") or {}
    rss, pss, uss = (sorted(memory.get(f"{kind}_bytes") or [0]) for kind in ("rss", "pss", "uss"))
    median = [values[len(values) // 2] for values in (rss, pss, uss)]
    if not median[2]:
        return "memory per task, WORKERS=8: not read (no /proc/self/smaps_rollup in the tasks)"
    shared = median[0] - median[2]
    fits = f"{(total - shared) // median[2]}" if total else "unknown (the engine's memory is unknown)"
    return (f"memory per task, WORKERS=8, last epoch (median): resident {median[0] / 1e6:.0f} MB, proportional "
            f"{median[1] / 1e6:.0f} MB, unique {median[2] / 1e6:.0f} MB (shared {shared / 1e6:.0f} MB); the most "
            f"WORKERS this engine's {(total or 0) / 1e9:.1f} GB holds at that cost: {fits}")


def run(folder: Path, label: str, settings: Settings) -> dict:
    console.say(f"--- bench: {label}")
    code = runner.up(settings.replace(runs_dir=str(folder), run=label), link_latest=False)
    run_dir = folder / label
    summary = Summary.read(run_dir)
    end = chief_end(run_dir)
    if code != 0:
        return {"ok": False, **end}
    ends = [r for row in summary.tasks for r in by_event(runfolder.events(run_dir, row.task), "end")]
    return {"ok": True, **end, "to_first_step": end["first_step_at"] - summary.launched_at,
            "phases": phases(run_dir, summary.launched_at), "memory": last_epoch_memory(run_dir, summary),
            "wall_seconds": summary.wall_seconds, "rss": [r["peak_rss_bytes"] for r in ends],
            "examples_per_second": settings.global_batch / end["steady_step_seconds"], **audit_figures(run_dir)}


def best_of(results: list[dict]) -> dict:
    """The run that reached its first step soonest, with the best steady throughput of them all."""
    done = [result for result in results if result["ok"]] or results
    soonest = min(done, key=lambda result: result.get("to_first_step", float("inf")))
    best = dict(soonest)
    best["examples_per_second"] = max(result.get("examples_per_second", 0) for result in done)
    best["steady_step_seconds"] = min(result.get("steady_step_seconds", float("inf")) for result in done)
    best["ok"] = all(result["ok"] for result in results)
    return best


def compose_clis(settings: Settings) -> list[str]:
    """The Compose CLIs to measure: COMPOSE's, or with COMPOSE=auto every one this machine has."""
    if settings.compose != "auto":
        compose.find_compose(settings.compose)
        return [settings.compose]
    found = []
    for cli in ("v2", "v1"):
        try:
            compose.find_compose(cli)
            found.append(cli)
        except LabError:
            pass
    if not found:
        compose.find_compose("auto")  # no Compose CLI at all: its one line says what to install
    return found


def seconds(result: dict, phase: str) -> str:
    value = (result.get("phases") or {}).get(phase)
    return "-" if value is None else f"{value:.1f} s"


def ms(seconds) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds else "-"


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def plan(settings: Settings) -> Settings:
    """The bench's base run, multiworker 2 on compose, with every variant it derives checked, so
    that a GLOBAL_BATCH the 8 workers cannot split is refused before the bench's folder exists;
    BENCH=stall's, its own (reports/stallbench.py)."""
    if settings.bench == "stall":
        from tflab.reports import stallbench

        return stallbench.plan(settings)
    if settings.gpus:
        raise LabError(f"make bench does not take GPUS={settings.gpus}: it measures the lab against "
                       "BACKEND=local, which runs on CPUs; leave GPUS empty")
    if settings.platform:
        raise LabError(f"make bench does not take PLATFORM={settings.platform}: it measures the lab against "
                       "BACKEND=local, which runs on this machine's own architecture; leave PLATFORM empty")
    two = settings.replace(strategy="multiworker", workers=2, backend="compose")
    for changes in ({"backend": "local"}, {"strategy": "single"}, {"steps_per_execution": 16}, {"loop": "custom"},
                    {**FAST, "allreduce_probe": ALLREDUCE_CALLS}, {"strategy": "single", **FAST}, {"workers": 8},
                    {"audit": "off"}):
        two.replace(**changes)
    return two


def bench(settings: Settings) -> int:
    if settings.bench == "stall":
        from tflab.reports import stallbench

        return stallbench.bench(settings)
    two = plan(settings)
    folder = runfolder.planned(settings)
    docker.check()
    docker.check_cpus("CPUS", settings.cpus)
    clis = compose_clis(settings)
    local.find_python()
    trainer = images.trainer_variant(settings)
    image = images.ensure_image(settings.base_image, trainer)
    runfolder.make(folder, link_latest=True)
    fast = FAST
    # The backends alternate, twice, and each keeps its better run: one cold start (a page cache
    # flushed by a build, say) should not decide the lab's overhead.
    # Every Compose CLI there is (v1 and v2 differ in how they create and start containers).
    rounds = [{**{cli: run(folder, f"multiworker-2-compose-{cli}-{i}", two.replace(compose=cli)) for cli in clis},
               "local": run(folder, f"multiworker-2-local-{i}", two.replace(backend="local"))} for i in (1, 2)]
    by_cli = {cli: best_of([one[cli] for one in rounds]) for cli in clis}
    r = {
        **{f"compose-{cli}": result for cli, result in by_cli.items()},
        "compose": by_cli[clis[0]],
        "local": best_of([one["local"] for one in rounds]),
        "single": run(folder, "single", two.replace(strategy="single")),
        "fit-spe16": run(folder, "multiworker-2-fit-spe16", two.replace(steps_per_execution=16)),
        "custom": run(folder, "multiworker-2-custom", two.replace(loop="custom")),
        "best": run(folder, "multiworker-2-custom-spe16", two.replace(**fast, allreduce_probe=ALLREDUCE_CALLS)),
        "single-best": run(folder, "single-custom-spe16", two.replace(strategy="single", **fast)),
        "eight": run(folder, "multiworker-8", two.replace(workers=8)),
        # AUDIT's cost: the same run as "compose" (AUDIT=on unless given) with the instruments off.
        "audit-off": run(folder, "multiworker-2-audit-off", two.replace(audit="off")),
    }
    step = {name: result.get("steady_step_seconds") for name, result in r.items()}
    floor = (r["best"]["allreduce_seconds"] or 0) + (step["single-best"] or 0)
    size = docker.image_size(image)
    base = images.ensure_base(settings.base_image, trainer.platform, trainer.platform)
    rebuild = imagebench.code_only_rebuild_seconds(trainer, images.packages_tag(trainer, images.existing_id(base)))
    eight = r["eight"]
    eps = {name: result.get("examples_per_second") for name, result in r.items()}
    first = {name: result.get("to_first_step") for name, result in r.items()}
    losses = sorted({round(result.get("final_loss") or -1, 4) for result in r.values()})
    rss = eight.get("rss") or [0]
    lines = [line for cli in clis for line in (
        f"compose {cli} / local steady examples/s, multiworker 2: {ratio(eps[f'compose-{cli}'], eps['local'])}"
        f"  ({eps[f'compose-{cli}'] or 0:.0f} vs {eps['local'] or 0:.0f} examples/s; each the better of 2 runs)",
        f"compose {cli} / local time to first step, multiworker 2: {ratio(first[f'compose-{cli}'], first['local'])}"
        f"  ({first[f'compose-{cli}'] or 0:.1f} vs {first['local'] or 0:.1f} s, image built; each the better of 2)",
        f"  where it goes, compose {cli} | local: " + ", ".join(
            f"{phase} {seconds(r[f'compose-{cli}'], phase)} | {seconds(r['local'], phase)}" for phase in PHASES))]
    lines += [
        f"multiworker 2 / single steady step, Keras fit: {ratio(step['compose'], step['single'])}"
        f"  ({ms(step['compose'])} vs {ms(step['single'])})",
        f"multiworker 2 / single steady step, custom loop + STEPS_PER_EXECUTION=16: "
        f"{ratio(step['best'], step['single-best'])}  ({ms(step['best'])} vs {ms(step['single-best'])})",
        f"multiworker 2 step / its floor (one bare all-reduce + one single-replica step): "
        f"fit {ratio(step['compose'], floor)}, fit + STEPS_PER_EXECUTION=16 {ratio(step['fit-spe16'], floor)}, "
        f"custom {ratio(step['custom'], floor)}, custom + STEPS_PER_EXECUTION=16 {ratio(step['best'], floor)}"
        f"  (floor {ms(floor)})",
        f"multiworker 2 steady step: fit {ms(step['compose'])}, fit + STEPS_PER_EXECUTION=16 "
        f"{ms(step['fit-spe16'])}, custom {ms(step['custom'])}, custom + STEPS_PER_EXECUTION=16 {ms(step['best'])}",
        f"bare all-reduce of {r['best'].get('allreduce_floats')} float32s, multiworker 2: "
        f"{ms(r['best']['allreduce_seconds'])} (median of {ALLREDUCE_CALLS})",
        f"AUDIT={two.audit} / off, multiworker 2 fit: steady step {ms(step['compose'])} vs {ms(step['audit-off'])}, "
        f"mean step after epoch 1 {ms(r['compose'].get('mean_step_seconds'))} vs "
        f"{ms(r['audit-off'].get('mean_step_seconds'))}  ({r['compose'].get('sampled_steps', 0)} steps of each epoch "
        "hashed, the rest counted)",
        f"final losses equal across these runs: {len(losses) == 1}  ({losses})",
        f"trainer image: {size / 1e9:.2f} GB; rebuild after a code-only change: {rebuild:.1f} s",
        f"WORKERS=8: {'ok' if eight['ok'] else 'FAILED'} in {eight.get('wall_seconds', 0):.1f} s, peak RSS per worker "
        f"{min(rss) / 1e6:.0f}-{max(rss) / 1e6:.0f} MB ({sum(rss) / 1e9:.2f} GB together)",
        memory_line(eight, docker.engine_memory()),
    ]
    print("\n".join(["", f"bench {folder.name} ({time.strftime('%Y-%m-%d')}):", *lines]))
    runfolder.write_whole(folder / "bench.txt", "\n".join(lines) + "\n")
    runfolder.write_json(folder / "bench.json", {"runs": r, "floor_seconds": floor, "image_bytes": size,
                                               "code_only_rebuild_seconds": rebuild})
    return 0 if all(result["ok"] for result in r.values()) else 1
