"""A run's live progress, printed as it comes: each task's new events of its JSONL log (the
chief's epochs, everyone's milestones) and a SCRIPT's or a replica's own output, read as foreign
a bounded chunk at a poll, so the lab's memory stays flat whatever a task prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tflab.core import foreign, runfolder
from tflab.core.cluster import Cluster
from tflab.core.foreign import ForeignFile, shown
from tflab.core.runfolder import log_name, output_name
from tflab.core.schema import loss_value, problems
from tflab.core.settings import Settings
from tflab.supervisor import resume

# What a live printer reads of a task's file at one poll (half a second): a task printing faster
# than that is caught up over the next polls, and the lab's memory stays flat.
POLL_BYTES = 2 * foreign.MAX_LINE_BYTES
POLL_CHUNKS = 64


class ProgressPrinter:
    """Prints each new event of every task's log once: the chief's epochs, everyone's milestones."""

    def __init__(self, settings: Settings, the_cluster: Cluster, run_dir: Path):
        self.settings = settings
        self.run_dir = run_dir
        self.chief = the_cluster.chief
        self.offsets = {task: 0 for task in the_cluster.tasks}
        self.warned: set[str] = set()  # tasks whose log had a line skipped, said once each
        # each task's attempts so far (a script's resume)
        self.tries: dict[str, list[list[dict]]] = {task: [] for task in the_cluster.tasks}
        # A SCRIPT's servers and evaluator, which the lab ends once the chief is done (labrun.LabRun.clean_exits):
        # their launcher's error then is the lab's SIGTERM, not theirs.
        self.ended_by_lab = set(the_cluster.servers + the_cluster.evaluators) if settings.script else set()
        self.chief_done = False

    def print_new(self) -> None:
        for task in self.offsets:
            for record in self._new_records(task):
                if record.get("event") == "start" or not self.tries[task]:
                    self.tries[task].append([])
                self.tries[task][-1].append(record)
                try:
                    line = self.describe(record)
                except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                    self._skipped(task, "an event of a shape the lab does not write")
                    continue
                if line:
                    print(shown(f"[{task}] {line}", limit=0), flush=True)

    def _skipped(self, task: str, why: str) -> None:
        """A task's own stray line in its log (a print to $TFLAB_LOG, say): said once, then skipped,
        as the summary skips it."""
        if task not in self.warned:
            self.warned.add(task)
            print(shown(f"[{task}] skipped a line of {task}.jsonl that is not one of the lab's events ({why}); "
                        "the summary skips such lines too", limit=0), flush=True)

    def _new_records(self, task: str) -> list[dict]:
        records = []
        for complete_lines in new_lines(self.run_dir, log_name(task), self.offsets, task,
                                        lambda why: self._skipped(task, why)):
            for line in complete_lines.split(b"\n"):
                if not line.strip():
                    continue
                record, why = foreign.json_line(line)
                found = problems(record) if record is not None else [why]
                if record is None or found:
                    self._skipped(task, found[0])
                else:
                    records.append(record)
        return records

    def describe(self, record: dict) -> str | None:
        event = record.get("event")
        if event == "end" and record.get("task") == self.chief:
            self.chief_done = True
        if event == "start" and record.get("role") == "script":  # every task's; its Keras once it imports one
            return f"started: tensorflow {record['versions'].get('tensorflow')}"
        if event == "start" and record["task"] == self.chief:
            versions = record["versions"]
            return f"started: tensorflow {versions.get('tensorflow')}, {versions.get('keras')}"
        if event == "imported" and record["task"] == self.chief:
            # tf_keras: TensorFlow's own import brings it in as tf.keras under TF_USE_LEGACY_KERAS=1
            what = {"keras": "Keras 3", "tf_keras": "tf.keras under TF_USE_LEGACY_KERAS=1"}.get(record["module"], "")
            name = "tf-keras" if record["module"] == "tf_keras" else record["module"]
            return f"imported {name} {record['version']}" + (f" ({what})" if what else "")
        if event == "cluster_ready" and record["replicas"] == 0:
            return f"serving after {record['seconds']:.1f} s"
        if event == "cluster_ready":
            return f"ready after {record['seconds']:.1f} s: {record['replicas']} replicas in sync"
        if event == "epoch" and record["task"] == self.chief:
            of = "" if self.settings.script else f"/{self.settings.epochs}"  # a script's epochs are its own
            rate = record.get("examples_per_second")  # Keras's own epochs (observe.py) know no batch
            return (f"epoch {record['epoch']}{of}  loss {loss_value(record['loss']):.4f}  {record['seconds']:.2f} s"
                    + (f"  {rate:.0f} examples/s" if rate is not None else f"  {record['steps']} steps"))
        if event in ("fit", "checkpoint"):  # a script's: said only after a restart, where it resumed
            tries = self.tries[record["task"]]
            if len(tries) < 2:
                return None
            resumed, words = (resume.fit_words(record, tries[-2]) if event == "fit"
                              else resume.checkpoint_words(record))
            return f"after restart {len(tries) - 1}: {words}"
        if event == "end" and record["role"] == "server":
            return f"ended after serving for {record['total_seconds']:.1f} s"
        if event == "eval":
            return f"eval of epoch {record['epoch']} (step {record['step']}): loss {loss_value(record['loss']):.4f}"
        if event == "end" and record["role"] == "evaluator":
            return f"done in {record['total_seconds']:.1f} s: {record['evaluations']} checkpoints evaluated"
        if event == "end" and record["role"] == "script":
            return f"done in {record['total_seconds']:.1f} s: the script exited with code {record['exit_code']}"
        if event == "end":
            return f"done in {record['total_seconds']:.1f} s: final loss {loss_value(record['final_loss']):.4f}"
        if event == "restored" and not self.settings.script:  # a script's `fit` says it
            return f"restored from the backup: resuming at epoch {record['epoch']}, step {record['step']}"
        if event == "error" and self.chief_done and record["task"] in self.ended_by_lab:
            code = re.search(r"exited with code (\d+)", record["message"])
            return f"ended by the lab once the chief was done (exit code {code.group(1) if code else '?'})"
        if event == "error":
            return f"error: {record['message'].splitlines()[0][:300]}"
        return None


def new_lines(run_dir: Path, name: str, offsets: dict, task: str, skipped) -> Iterator[bytes]:
    """The whole lines a task added to a file of its space since `offsets[task]`, a chunk of at
    most POLL_BYTES at a time (the lab's memory stays flat whatever a task prints), up to
    POLL_CHUNKS chunks a poll (a task printing faster than the terminal does not hold the run's
    loop); a line still being written waits for the next poll, one with no end in sight is cut."""
    for _ in range(POLL_CHUNKS):
        try:
            data = runfolder.read_task_file(run_dir, name, POLL_BYTES, offset=offsets[task], whole=False)
        except FileNotFoundError:
            return
        except ForeignFile as error:
            skipped(str(error))
            return
        lines = data[: data.rfind(b"\n") + 1]
        if not lines and len(data) > foreign.MAX_LINE_BYTES:
            skipped(f"a line longer than {foreign.MAX_LINE_BYTES // 1024} KiB")
            lines = data
        if not lines:
            return
        offsets[task] += len(lines)
        yield lines
        if len(data) < POLL_BYTES:
            return


class ScriptOutputPrinter:
    """A SCRIPT run's output as it comes: each task's new whole lines of `<task>.out` (written by
    its launcher, a Keras progress bar as its last drawing), printed `[worker-0] line`, read as
    foreign and shown escaped."""

    def __init__(self, the_cluster: Cluster, run_dir: Path):
        self.run_dir = run_dir
        self.offsets = {task: 0 for task in the_cluster.tasks}

    def print_new(self) -> None:
        for task in self.offsets:
            for lines in new_lines(self.run_dir, output_name(task), self.offsets, task, lambda why: None):
                for line in lines.decode(errors="replace").splitlines():
                    # the lab's own trainer, replayed, names its task itself: once is enough
                    said = line if line.startswith(f"[{task}] ") else f"[{task}] {line}"
                    print(shown(said, limit=2000), flush=True)


class Printers:
    """Several printers as one: print_new calls each in turn."""

    def __init__(self, *printers):
        self.printers = printers

    def print_new(self) -> None:
        for printer in self.printers:
            printer.print_new()
