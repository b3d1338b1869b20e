"""`make bench BENCH=stall`: the stall watch (supervisor/stall.py) measured, as issue 42 asks.

    make bench BENCH=stall                              # 10 stalls, the healthy set, 3 pairs on/off
    make bench BENCH=stall BENCH_STALLS=4 BENCH_PAIRS=1 SEED=7

Three parts, one run each in runs/<RUN>/, figures printed and kept in stallbench.txt and .json:
- stalls: BENCH_STALLS stalls at points drawn from SEED, alternately in the lab's trainer (make
  chaos SCENARIO=hang, never undone, after a drawn epoch on a drawn worker) and in a SCRIPT
  (tests/integration/scripts/stall_at.py: a drawn worker blocks in a callback or its input
  generator at a drawn step); for each, where it was injected, the finding's kind and stopped task, and the
  seconds from the stall to the finding; then "N of M named correctly";
- healthy: runs that must end ok with no stall finding, those the integration tests do not
  already run: a long first step (every worker's first batch 45 s, past the watch's floor) and a
  large checkpoint (every worker saves 512 MB after each epoch), both SCRIPTs, and a slow link of
  20 ms on a worker of the lab's trainer (1024 examples: 16 steps an epoch); each with the largest
  gap between advances it showed;
- cost: BENCH_PAIRS pairs of the lab's default run, STALL=auto and STALL=off in turn, the chief's
  steady step of each (medians) and their ratio. The watch runs on the host, so the figure to
  read is whether the ratio stands out of the noise of one pair to the next.

Figures, not assertions: one shared machine's runs, minutes apart.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tflab import backends, console, home
from tflab.core import hostfiles, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.schema import parse_events
from tflab.core.settings import Settings
from tflab.faults.chaos import Chaos
from tflab.supervisor import runner
from tflab.supervisor.stall import ADVANCES

# The SCRIPT it stalls: a test script of the repository's (a checkout's; an installed lab has none).
STALL_SCRIPT = home.CODE_ROOT.parent / "tests" / "integration" / "scripts" / "stall_at.py"
SCRIPT_EPOCHS, SCRIPT_STEPS = 5, 16  # the script's fit: 5 epochs of 16 steps
SLOW_FIRST_SECONDS = 45  # past stall.FLOOR_SECONDS: a first step the floor alone would call a stall
CHECKPOINT_MB = 512
# Twice the integration test's (10ms,100mbit). At 50 ms the lab's trainer failed: its collectives
# ended in DeadlineExceeded 37 s after the link slowed, restarts and all (no stall: tasks failed).
SLOW_LINK = "20ms,100mbit"
SLOW_LINK_EXAMPLES = 1024  # 16 steps an epoch: each takes some 0.3 s over that link, so the run ends in minutes
HEALTHY_TIMEOUT = 480.0  # a healthy run's TIMEOUT: ample, and a bound on the bench
CHAOS_LOG_BYTES = 1 << 20
STALL_TIMEOUT = 240.0  # a stall run's TIMEOUT: a stall not found by then is a miss, at TIMEOUT's moment
# What a finding must be, by how the stall was made.
EXPECTED = {"hang": "hang", "callback": "stuck-callback", "pipeline": "stuck-input-pipeline"}


@dataclass(frozen=True)
class Injection:
    """One stall: in the lab's trainer (how: hang, after epoch `at`) or in the SCRIPT (how: callback
    or pipeline, at global step `at`), on worker `worker`."""

    where: str  # "trainer" | "script"
    how: str  # "hang" | "callback" | "pipeline"
    worker: int
    at: int

    @property
    def target(self) -> str:
        return f"worker-{self.worker}"

    @property
    def expected(self) -> str:
        return EXPECTED[self.how]

    def words(self) -> str:
        if self.where == "trainer":
            return f"trainer: hang on {self.target} after epoch {self.at}"
        epoch, step = divmod(self.at, SCRIPT_STEPS)
        return f"script: {self.how} blocks on {self.target} at step {self.at} (epoch {epoch + 1}, batch {step})"


def draw(seed: int, count: int, workers: int, epochs: int) -> list[Injection]:
    """`count` stalls from `seed`: even ones in the lab's trainer, odd ones in the SCRIPT. A hang comes
    after an epoch from 1 to EPOCHS-2 (the signal lands a poll and an epoch or so later, with
    training left); a script's block at a step from 2 on, before its last epoch: a stall before a
    run's second advance is held to the ceiling by design (a long first step looks the same)."""
    rng = random.Random(seed)
    drawn = []
    for index in range(count):
        worker = rng.randrange(workers)
        if index % 2 == 0:
            drawn.append(Injection("trainer", "hang", worker, rng.randint(1, epochs - 2)))
        else:
            how = rng.choice(("callback", "pipeline"))
            drawn.append(Injection("script", how, worker, rng.randint(2, (SCRIPT_EPOCHS - 1) * SCRIPT_STEPS - 1)))
    return drawn


def named_correctly(injection: Injection, stall: dict | None) -> bool:
    """The finding came at a stall (not at TIMEOUT), of the kind the stall's making expects, and names
    the injected worker as the one that stopped."""
    return stall is not None and stall.get("moment") == "stall" and stall.get("kind") == injection.expected \
        and str(stall.get("what", "")).startswith(f"{injection.target} stopped")


def tally(results: list[dict]) -> str:
    right = sum(1 for result in results if result["correct"])
    return f"{right} of {len(results)} named correctly"


def advance_times(records: list[dict]) -> list[float]:
    return sorted(r["time"] for r in records if r.get("event") in ADVANCES and isinstance(r.get("time"), float))


def largest_gap(times_by_task: dict[str, list[float]]) -> float | None:
    """The largest gap between one advance of any trainer and the next, the first advance's own wait
    (start, imports, rendezvous) left out: the stall watch's pace, after the fact."""
    times = sorted(t for times in times_by_task.values() for t in times)
    return max((b - a for a, b in zip(times, times[1:])), default=None)


def onset(injection: Injection, run_dir: Path, found_at: float | None) -> float | None:
    """When the stall began: a hang's injection (chaos.jsonl); a script's block, the stuck worker's
    last advance before the finding (within a step of it: the script's steps take milliseconds)."""
    if injection.where == "trainer":
        try:
            data = runfolder.read_lab_file(run_dir, runfolder.CHAOS_LOG, CHAOS_LOG_BYTES)
        except (OSError, ForeignFile):
            return None
        injected = [r["time"] for r in parse_events(data)
                    if r.get("event") == "injected" and isinstance(r.get("time"), float)]
        return injected[0] if injected else None
    times = [t for t in advance_times(runfolder.events(run_dir, injection.target)) if found_at is None or t <= found_at]
    return times[-1] if times else None


def trainer_times(run_dir: Path, tasks: list[str]) -> dict[str, list[float]]:
    return {task: advance_times(runfolder.events(run_dir, task)) for task in tasks}


def plan(settings: Settings) -> Settings:
    """The bench's base run (multiworker on compose, the given WORKERS), every trial's settings checked
    before its folder exists."""
    if settings.script:
        raise LabError(f"make bench BENCH=stall does not take SCRIPT={settings.script}: it runs its own "
                       f"({STALL_SCRIPT.name}) and the lab's trainer; leave SCRIPT out")
    if not STALL_SCRIPT.is_file():
        raise LabError(f"make bench BENCH=stall needs a checkout of the lab's repository: it runs its script "
                       f"tests/integration/scripts/{STALL_SCRIPT.name}, which {STALL_SCRIPT.parent} does not hold")
    if settings.workers < 2:
        raise LabError(f"WORKERS={settings.workers} is not allowed with make bench BENCH=stall: expected 2 or more "
                       "(a stall leaves a peer waiting for the worker that stopped)")
    if settings.epochs < 3:
        raise LabError(f"EPOCHS={settings.epochs} is not allowed with make bench BENCH=stall: expected 3 or more "
                       "(a hang comes after an epoch from 1 to EPOCHS-2, with training left)")
    base = settings.replace(strategy="multiworker", backend="compose", chief=0, evaluator=0)
    for trial in [*stall_trials(base, ""), *healthy_trials(base, "")]:
        if chaos_of(trial):
            Chaos(trial).check(trial)
    return base


def chaos_of(trial: Settings) -> bool:
    """Whether a trial is a make chaos run (a hang, the slow link) rather than a plain one."""
    return trial.scenario in ("hang", "slow-link") and not trial.script


def script_settings(base: Settings, args: str, **changes) -> Settings:
    return base.replace(script=hostfiles.script_on_host("SCRIPT", str(STALL_SCRIPT)), args=args, **changes)


def stall_trials(base: Settings, folder: str) -> list[Settings]:
    trials = []
    for index, injection in enumerate(draw(base.seed, base.bench_stalls, base.workers, base.epochs)):
        name = f"stall-{index + 1:02d}-{injection.where}-{injection.how}"
        common = dict(runs_dir=folder or base.runs_dir, run=name, timeout=STALL_TIMEOUT, restarts=0, stall="auto")
        if injection.where == "trainer":
            trials.append(base.replace(scenario="hang", target=injection.target, at=f"epoch:{injection.at}",
                                       heal="never", **common))
        else:
            trials.append(script_settings(base, f"--block {injection.how} --worker {injection.worker} "
                                                f"--step {injection.at} --epochs {SCRIPT_EPOCHS} "
                                                f"--steps {SCRIPT_STEPS}", **common))
    return trials


def healthy_trials(base: Settings, folder: str) -> list[Settings]:
    common = dict(runs_dir=folder or base.runs_dir, stall="auto", timeout=HEALTHY_TIMEOUT)
    workers = [f"worker-{i}" for i in range(base.workers)]
    return [script_settings(base, f"--slow-first {SLOW_FIRST_SECONDS}", run="healthy-long-first-step", **common),
            script_settings(base, f"--checkpoint-mb {CHECKPOINT_MB}", run="healthy-large-checkpoint", **common),
            base.replace(scenario="slow-link", target=workers[-1], at="epoch:2", slow_link=SLOW_LINK,
                         examples=SLOW_LINK_EXAMPLES, run="healthy-slow-link", **common)]


def run_one(trial: Settings) -> tuple[int, Summary]:
    console.say(f"--- bench: {trial.run}")
    code = runner.up(trial, link_latest=False, **({"observer": Chaos(trial)} if chaos_of(trial) else {}))
    return code, Summary.read(Path(trial.runs_dir) / trial.run)


def stall_result(injection: Injection, trial: Settings, summary: Summary) -> dict:
    run_dir = Path(trial.runs_dir) / trial.run
    found = summary.stall or {}
    found_at = found.get("found_at")
    began = onset(injection, run_dir, found_at)
    stopped = str(found.get("what", "")).split(" ", 1)[0] if found else None
    return {"run": trial.run, "injection": asdict(injection), "where": injection.words(), "outcome": summary.outcome,
            "kind": found.get("kind"), "moment": found.get("moment"), "stopped": stopped,
            "seconds_to_finding": found_at - began if found_at and began else None,
            "quiet_seconds": found.get("quiet_seconds"), "limit_seconds": found.get("limit_seconds"),
            "correct": named_correctly(injection, summary.stall)}


def healthy_result(trial: Settings, code: int, summary: Summary) -> dict:
    run_dir = Path(trial.runs_dir) / trial.run
    gap = largest_gap(trainer_times(run_dir, [row.task for row in summary.tasks if row.task.startswith("worker-")]))
    return {"run": trial.run, "ok": code == 0 and summary.ok, "outcome": summary.outcome,
            "stall": summary.stall, "largest_gap_seconds": gap, "wall_seconds": summary.wall_seconds}


def steady_step(run_dir: Path) -> float | None:
    records = runfolder.events(run_dir, runfolder.read_config(run_dir)["tasks"][0])
    ends = [r for r in records if r.get("event") == "end" and isinstance(r.get("steady_step_seconds"), float)]
    return ends[-1]["steady_step_seconds"] if ends else None


def cost_lines(pairs: list[dict[str, float | None]]) -> list[str]:
    """The watch's cost from pairs of steady steps (seconds), STALL=auto and STALL=off."""
    on = [pair["auto"] for pair in pairs if pair["auto"] and pair["off"]]
    off = [pair["off"] for pair in pairs if pair["auto"] and pair["off"]]
    if not on:
        return ["STALL=auto / off steady step: - (no pair of runs both ended with a steady step)"]
    each = ", ".join(f"{a * 1000:.2f}/{b * 1000:.2f}" for a, b in zip(on, off))
    return [f"STALL=auto / off steady step, multiworker 2 fit: {statistics.median(on) / statistics.median(off):.3f}"
            f"  (medians {statistics.median(on) * 1000:.2f} vs {statistics.median(off) * 1000:.2f} ms over "
            f"{len(on)} pair{'s' * (len(on) != 1)}; pair by pair, ms: {each}; ratio pair by pair "
            f"{min(a / b for a, b in zip(on, off)):.2f} to {max(a / b for a, b in zip(on, off)):.2f})"]


def fmt(seconds) -> str:
    return f"{seconds:.1f} s" if isinstance(seconds, (int, float)) else "-"


def bench(settings: Settings) -> int:
    base = plan(settings)
    folder = runfolder.planned(settings)
    backends.check_engine(base)
    runfolder.make(folder, link_latest=True)
    began = time.time()
    stalls: list[dict] = []
    healthy: list[dict] = []
    pairs: list[dict] = []

    def keep() -> None:  # after every run, so that a bench stopped midway leaves what it measured
        runfolder.write_json(folder / "stallbench.json", {"stalls": stalls, "healthy": healthy, "pairs": pairs})

    injections = draw(base.seed, base.bench_stalls, base.workers, base.epochs)
    for injection, trial in zip(injections, stall_trials(base, str(folder))):
        _, summary = run_one(trial)
        stalls.append(stall_result(injection, trial, summary))
        keep()
    for trial in healthy_trials(base, str(folder)):
        code, summary = run_one(trial)
        healthy.append(healthy_result(trial, code, summary))
        keep()
    for index in range(base.bench_pairs):
        pair = {}
        for stall in ("auto", "off"):
            trial = base.replace(runs_dir=str(folder), run=f"cost-{index + 1}-stall-{stall}", stall=stall)
            code, _ = run_one(trial)
            pair[stall] = steady_step(folder / trial.run) if code == 0 else None
        pairs.append(pair)
        keep()
    lines = [f"stalls injected at random points (SEED={base.seed}), WORKERS={base.workers}: {tally(stalls)}"]
    lines += [f"  {r['where']:<66} -> {r['kind'] or 'none'}"
              f"{'' if r['moment'] in (None, 'stall') else ' at ' + r['moment']}, stopped: {r['stopped'] or '-'}, "
              f"stall to finding {fmt(r['seconds_to_finding'])}"
              f" (limit {fmt(r['limit_seconds'])}){'' if r['correct'] else '  WRONG'}" for r in stalls]
    found = [r["seconds_to_finding"] for r in stalls if r["seconds_to_finding"] is not None]
    if found:
        lines.append(f"  stall to finding: {min(found):.1f} to {max(found):.1f} s, "
                     f"median {statistics.median(found):.1f} s")
    lines.append(f"healthy runs with no stall finding: {sum(1 for r in healthy if r['ok'] and not r['stall'])} "
                 f"of {len(healthy)}")
    lines += [f"  {r['run']:<28} {r['outcome']:<9} stall: {(r['stall'] or {}).get('kind', 'none'):<14} largest gap "
              f"between advances {fmt(r['largest_gap_seconds'])}, wall {fmt(r['wall_seconds'])}" for r in healthy]
    lines += cost_lines(pairs)
    lines.append(f"bench wall: {time.time() - began:.0f} s")
    print("\n".join(["", f"bench {folder.name} BENCH=stall ({time.strftime('%Y-%m-%d')}):", *lines]))
    runfolder.write_whole(folder / "stallbench.txt", "\n".join(lines) + "\n")
    right = all(r["correct"] for r in stalls) and all(r["ok"] and not r["stall"] for r in healthy)
    return 0 if right else 1
