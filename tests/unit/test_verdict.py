"""make chaos's verdict on the resume (issue 43, faults/verdict.py and faults/twin.py): equivalent,
lossy, corrupt, hang, failed, or "no twin: ..." where the run cannot be compared, never a guess.
Summaries are built as the lab writes them (Summary.from_dict checks each), events as tasks log them."""

import math
from pathlib import Path

import pytest
from tflab.core import runfolder, schema
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary, SummaryError
from tflab.core.settings import Settings
from tflab.faults import chaos, twin, verdict
from tflab.supervisor import summary as summary_module
from tflab.supervisor import table

pytestmark = pytest.mark.unit

STEPS = 32
SETTINGS = Settings(epochs=5, examples=2048, scenario="kill", at="epoch:2", target="worker-1").to_dict()
KERNEL = {"name": "dense/kernel:0", "size": 320, "sum": 1.25, "l2": 4.0}
BIAS = {"name": "dense/bias:0", "size": 10, "sum": -0.5, "l2": 0.75}


def judge(summary, events, twin=None, no_twin=""):
    found = verdict.judge(summary, events, twin, no_twin, twin_ignored)
    assert found["kind"] in verdict.KINDS and set(found) == set(verdict.blank()), found
    assert found["twin"] is None or found["kind"] in ("equivalent", "lossy")  # named only where compared
    return found


twin_ignored = twin.ignored()


def row(task, loss=0.84, fingerprint=None, **more):
    return {"task": task, "status": "ok", "role": "trainer", "exit_code": 0, "final_loss": loss,
            "weights_sha256": "ab" * 32, "weights_fingerprint": fingerprint or [KERNEL, BIAS], **more}


def summary(run="chaos-run", ok=True, outcome="ok", chaos=None, settings=None, tasks=None, **more):
    return Summary.from_dict({
        "run": run, "strategy": "multiworker", "backend": "compose", "outcome": outcome, "ok": ok,
        "launched_at": 1.0, "wall_seconds": 9.0, "settings": settings or SETTINGS, "weights_agree": True,
        "tasks": tasks or [row("worker-0"), row("worker-1")], "restarts": [5.0] if chaos else [],
        **({"chaos": chaos} if chaos else {}), **more})


def undisturbed(run="twin-1", settings=None, **more):
    plain = {**SETTINGS, "scenario": "kill", "at": "epoch:2", "target": "", "run": run, **(settings or {})}
    return summary(run=run, settings=plain, **more)


CHAOS = {"scenario": "kill", "target": "worker-1", "at": "epoch:2", "heal": "5", "injected": True,
         "outcome": "survived", "landed_step": None}


def attempt(start_epoch, epochs, restored=None, errors=()):
    found = [{"event": "start", "time": 1.0}]
    if restored:
        found.append({"event": "restored", "epoch": restored[0], "step": restored[1], "time": 2.0})
    found += [{"event": "epoch", "epoch": n, "loss": 1.0, "seconds": 0.1, "steps": STEPS, "time": 3.0}
              for n in range(start_epoch, start_epoch + epochs)]
    return found + [{"event": "error", "message": message, "time": 4.0} for message in errors]


def events(first=3, restored=(4, 0), errors=()):
    """Each worker: an attempt of `first` epochs, then one restored at `restored` to the end."""
    second = attempt(restored[0], 5 - restored[0] + 1, restored) if restored else attempt(1, 5)
    return {task: attempt(1, first, errors=errors) + second for task in ("worker-0", "worker-1")}


def test_a_resume_at_the_step_reached_that_ends_at_the_twin_is_equivalent():
    found = judge(summary(chaos=CHAOS), events(), undisturbed())
    assert found["kind"] == "equivalent", found
    assert found["twin"] == "twin-1" and found["steps_repeated"] == 0 and found["steps_skipped"] == 0
    assert found["difference"] == 0.0
    assert "no step repeated or skipped" in found["words"]


def test_rounding_within_the_tolerance_is_equivalent_and_a_real_difference_is_lossy():
    rounded = [{**KERNEL, "sum": 1.25 + 1e-6, "l2": 4.0 * (1 + 1e-6)}, BIAS]
    near = undisturbed(tasks=[row("worker-0", 0.84 * (1 + 1e-6), rounded), row("worker-1", 0.84, rounded)])
    assert judge(summary(chaos=CHAOS), events(), near)["kind"] == "equivalent"
    # A few batches repeated mid-epoch ended 0.2 % off in the lab (MID_EPOCH_RTOL's measurement)
    off = undisturbed(tasks=[row("worker-0", 0.84 * 1.002), row("worker-1", 0.84)])
    found = judge(summary(chaos=CHAOS), events(), off)
    assert found["kind"] == "lossy" and "worker-0's final loss" in found["words"], found
    assert found["difference"] > 1
    moved = [{**KERNEL, "l2": 4.01}, BIAS]
    found = judge(summary(chaos=CHAOS), events(), undisturbed(tasks=[row("worker-0", fingerprint=moved),
                                                                            row("worker-1", fingerprint=moved)]))
    assert found["kind"] == "lossy" and "dense/kernel:0 L2 norm" in found["words"], found


def test_steps_repeated_from_the_landed_step_and_skipped_past_what_was_reached():
    landed = {**CHAOS, "landed_step": 100}  # AT=step:100 on worker-1; epoch 3 ended at 96
    found = judge(summary(chaos=landed), events(first=3, restored=(4, 0)), undisturbed())
    assert found["steps_repeated"] == 4
    assert "restart 1: step 100 reached (worker-1), resumed at 96 on every task" in found["words"]
    skipped = judge(summary(chaos=CHAOS), events(first=2, restored=(4, 0)), undisturbed())
    assert skipped["steps_skipped"] == STEPS and "0 steps repeated, 32 skipped" in skipped["words"]
    # The target killed between epoch 3's backup and its epoch event: the chief logged epoch 3, so
    # the cluster had reached 96, and resuming there skipped nothing
    raced = {**events(first=3, restored=(4, 0)), "worker-1": events(first=2, restored=(4, 0))["worker-1"]}
    found = judge(summary(chaos=CHAOS), raced, undisturbed())
    assert (found["steps_repeated"], found["steps_skipped"]) == (0, 0), found
    # A second restart whose attempt died before it trained forgets nothing of the first's 96 steps
    died = {task: records[:4] + [{"event": "start", "time": 5.0}] + records[4:]
            for task, records in events(first=3, restored=(4, 0)).items()}
    again = judge(summary(chaos=CHAOS), died, undisturbed())
    assert (again["steps_repeated"], again["steps_skipped"]) == (0, 0), again
    over = judge(summary(chaos=CHAOS), events(first=3, restored=None), None, "VERDICT=off")
    assert over["steps_repeated"] == 3 * STEPS  # started over: every step trained twice


def test_no_twin_says_why_and_never_guesses():
    found = judge(summary(chaos=CHAOS), events(), None, "none was run for these settings")
    assert found["kind"] == "no twin" and found["words"].startswith("none was run")
    assert found["twin"] is None and found["steps_repeated"] == 0
    other = undisturbed(settings={"epochs": 3})
    found = judge(summary(chaos=CHAOS), events(), other)
    assert found["kind"] == "no twin" and "EPOCHS=3, not 5" in found["words"], found
    assert found["twin"] is None
    itself = judge(summary(chaos=CHAOS), events(), summary(run="twin-1", chaos=CHAOS))
    assert itself["kind"] == "no twin" and "is a chaos run itself" in itself["words"]
    failed = judge(summary(chaos=CHAOS), events(), undisturbed(ok=False, outcome="failed"))
    assert failed["kind"] == "no twin" and "did not finish ok (failed)" in failed["words"]
    fewer = judge(summary(chaos=CHAOS), events(), undisturbed(tasks=[row("worker-0")]))
    assert fewer["kind"] == "no twin" and "training tasks are not this run's" in fewer["words"]


@pytest.mark.parametrize("hostile", ["twin", 3, [], {"run": "x"}, {"tasks": "all", "run": "x"},
                                     {"tasks": [], "run": 7}])
def test_a_twin_of_the_wrong_shape_is_no_twin(hostile):
    found = judge(summary(chaos=CHAOS), events(), hostile)
    assert found["kind"] == "no twin" and found["words"].startswith("the run given as one has no summary"), found


def test_the_fault_own_settings_and_where_the_run_lies_are_no_difference():
    ours = summary(chaos=CHAOS)
    theirs = undisturbed(settings={"scenario": "pause", "heal": "20", "run": "x", "runs_dir": "/else"})
    assert verdict.twin_problem(ours, theirs, twin.ignored()) is None
    assert verdict.twin_problem(ours, theirs) is not None  # without the list, RUN differs


def test_a_torn_checkpoint_refused_is_corrupt_naming_the_file_and_the_task():
    torn = ("DataLossError: Unable to open table file /run/backup/chief/ckpt-3.data-00000-of-00001: DATA_LOSS: "
            "not an sstable (bad magic number): perhaps your file is in a different file format")
    found = judge(summary(chaos=CHAOS), events(errors=[torn]), undisturbed())
    assert found["kind"] == "corrupt", found
    assert found["file"] == "/run/backup/chief/ckpt-3.data-00000-of-00001" and found["by"] == "worker-0"
    missing = ("NotFoundError: Unsuccessful TensorSliceReader constructor: Failed to find any matching files for "
               "/run/backup/chief/ckpt-3")
    found = judge(summary(ok=False, outcome="failed", chaos=CHAOS), events(errors=[missing]), None)
    assert found["kind"] == "corrupt" and found["file"] == "/run/backup/chief/ckpt-3"
    unnamed = judge(summary(chaos=CHAOS), events(errors=["Checksum does not match: stored 1, computed 2"]))
    assert unnamed["kind"] == "corrupt" and unnamed["file"] is None
    # Recorded with TF 2.21: a tf.train.Checkpoint whose .data file was cut to half, restored. Its
    # traceback's own files (checkpoint/checkpoint.py) are no checkpoint of the run's.
    recorded = (Path(__file__).parent / "logs" / "torn-checkpoint.log").read_text()
    found = judge(summary(ok=False, outcome="failed", chaos=CHAOS), events(errors=[recorded]), None)
    assert (found["kind"], found["file"]) == ("corrupt", None), found
    assert found["words"] == "worker-0 refused a torn checkpoint: IndexError: Read less bytes than requested"
    explained = row("worker-1", status="failed", exit_code=1, explanation={
        "what": "could not read the checkpoint", "fix": "-", "signature": "torn-checkpoint", "link": None})
    found = judge(summary(ok=False, outcome="failed", chaos=CHAOS, tasks=[row("worker-0"), explained]), events())
    assert (found["kind"], found["by"]) == ("corrupt", "worker-1"), found
    record = judge(summary(chaos=CHAOS), events(errors=["DataLossError: corrupted record at 12"]), undisturbed())
    assert record["kind"] == "equivalent"  # a TFRecord's data loss is the data's, not a checkpoint's
    bundle = "DataLossError: Invalid size in bundle entry: key dense/kernel; stored size 1280; expected size 640"
    assert judge(summary(chaos=CHAOS), events(errors=[bundle]), undisturbed())["kind"] == "corrupt"
    lost = judge(summary(chaos=CHAOS), events(errors=["UnavailableError: Connection reset by peer"]),
                         undisturbed())
    assert lost["kind"] == "equivalent"  # a lost peer before the restart is what chaos does, not a torn file


def test_a_hang_names_the_stall_and_a_failure_its_explanation():
    stall = {"kind": "hang", "what": "worker-1 stopped in its callback; worker-0 waits in its all-reduce",
             "fix": "nothing", "places": {}, "seconds": 30.0}
    hung = judge(summary(ok=False, outcome="timed out", chaos=CHAOS, stall=stall), events(), None)
    assert hung["kind"] == "hang" and "worker-1 stopped in its callback" in hung["words"]
    bare = judge(summary(ok=False, outcome="stalled", chaos=CHAOS), events(), None)
    assert bare["kind"] == "hang" and "found no place" in bare["words"]
    explained = row("worker-1", status="failed", exit_code=1, error="UnavailableError: ...",
                    explanation={"what": "lost a peer mid-run", "fix": "...", "signature": "lost-peer", "link": None})
    failed = judge(summary(ok=False, outcome="failed", chaos=CHAOS, tasks=[row("worker-0"), explained]),
                           events(), None)
    assert failed == {**failed, "kind": "failed", "words": "worker-1 lost a peer mid-run"}
    coded = judge(summary(ok=False, outcome="failed", chaos=CHAOS,
                                  tasks=[row("worker-0"), row("worker-1", status="failed", exit_code=137)]),
                          events(), None)
    assert coded["kind"] == "failed" and coded["words"] == "worker-1 exited 137"


def test_a_job_that_failed_and_restarted_until_its_deadline_is_failed_not_hung():
    """make migrate of the operator's simple.yaml under a kill: every attempt failed on its download
    and the kubelet restarted it, until activeDeadlineSeconds; the verdict had called it a hang."""
    explained = row("worker-1", status="failed", exit_code=1, error="URLError: ...",
                    explanation={"what": "tried to reach the internet", "fix": "...", "signature": "no-route-out",
                                 "link": None})
    looping = judge(summary(ok=False, outcome="timed out", chaos=CHAOS, tasks=[row("worker-0"), explained],
                            restarts=[5.0, 20.0, 50.0]), events(), None)
    assert looping["kind"] == "failed"
    assert looping["words"] == ("timed out while its tasks kept failing and were restarted (3 restarts), not a "
                                "hang: worker-1 tried to reach the internet")
    once = judge(summary(ok=False, outcome="timed out", chaos=CHAOS, tasks=[row("worker-0"), explained],
                         restarts=[5.0]), events(), None)
    assert once["kind"] == "hang"  # the fault's own restart, then nothing: stuck
    quiet = judge(summary(ok=False, outcome="timed out", chaos=CHAOS, restarts=[5.0, 9.0]), events(), None)
    assert quiet["kind"] == "hang"  # restarted, but no task failed with an error: it stopped moving


def test_a_fault_that_never_landed_has_no_resume_to_judge():
    missed = {**CHAOS, "injected": False, "outcome": "not injected", "not_injected": "worker-1 never reached it"}
    found = judge(summary(chaos=missed), events(), undisturbed())
    assert found["kind"] == "not injected" and "worker-1 never reached it" in found["words"]


@pytest.mark.parametrize("records", [
    "not a list", [1, "two", None], [{"event": "epoch", "epoch": True, "steps": "32"}],
    [{"event": "start"}, {"event": "restored", "epoch": "4", "step": -1},
     {"event": "epoch", "epoch": 1, "steps": 2**70}],
    [{"event": "error", "message": ["DataLossError"]}],
])
def test_hostile_events_are_never_counted_and_never_crash(records):
    found = judge(summary(chaos=CHAOS), {"worker-0": records, "worker-1": []}, undisturbed())
    assert found["kind"] in ("equivalent", "no twin"), found
    assert found["steps_repeated"] in (0, None)


def test_no_summary_is_no_verdict():
    assert judge("summary", {})["words"].startswith("no verdict")
    assert judge({"tasks": "x"}, {})["kind"] == "no twin"


def test_weights_without_a_fingerprint_fall_back_to_the_digest():
    words = [{**KERNEL, "sum": "nan"}, BIAS]  # a weight that went NaN: its sum is the word
    ours = summary(chaos=CHAOS, tasks=[row("worker-0", fingerprint=words), row("worker-1", fingerprint=words)])
    assert judge(ours, events(), undisturbed())["kind"] == "equivalent"  # the same digest
    other = [row(task, weights_sha256="cd" * 32) for task in ("worker-0", "worker-1")]
    found = judge(ours, events(), undisturbed(tasks=other))
    assert found["kind"] == "lossy" and "a digest, no fingerprint" in found["words"] and found["difference"] is None
    script = [{**row(task, role="script"), "weights_sha256": None, "weights_fingerprint": None}
              for task in ("worker-0", "worker-1")]
    found = judge(summary(chaos=CHAOS, tasks=script), events(), undisturbed(tasks=script))
    assert found["kind"] == "equivalent" and "weights unchecked" in found["words"], found
    assert "and weights" not in found["words"]


def test_the_summary_checks_the_verdict_and_the_fingerprint():
    judged = judge(summary(chaos=CHAOS), events(), undisturbed())
    again = Summary.from_dict(summary(chaos={**CHAOS, "verdict": judged}).to_dict())
    assert again.chaos is not None and again.chaos["verdict"] == judged
    with pytest.raises(SummaryError, match="chaos.verdict.steps_repeated"):
        summary(chaos={**CHAOS, "verdict": {**judged, "steps_repeated": "4"}})
    with pytest.raises(SummaryError, match="chaos.verdict is"):
        summary(chaos={**CHAOS, "verdict": "equivalent"})
    with pytest.raises(SummaryError, match=r"weights_fingerprint\[0\].l2"):
        summary(tasks=[row("worker-0", fingerprint=[{**KERNEL, "l2": [1]}])])


def test_the_verdict_is_a_line_of_the_table_and_of_why():
    judged = judge(summary(chaos=CHAOS), events(), undisturbed())
    result = summary(chaos={**CHAOS, "verdict": judged})
    assert table.verdict_lines(result) == [f"chaos: verdict: equivalent: {judged['words']}"]
    assert table.verdict_lines(result)[0] in table.table(result).splitlines()
    assert table.verdict_lines(result)[0] in table.why_lines(result)
    foreign = summary(chaos={**CHAOS, "verdict": {**judged, "kind": "equivalent\x1b[2J"}})
    assert "\x1b" not in table.verdict_lines(foreign)[0]


def test_the_twin_key_is_the_training_settings_and_the_image(tmp_path):
    base = Settings(epochs=5, scenario="kill", at="epoch:2")
    assert twin.key(base, "img:a") == twin.key(base.replace(scenario="pause", at="epoch:3", heal="20", run="x",
                                                            verdict="off", twin="t"), "img:a")
    assert twin.key(base, "img:a") != twin.key(base, "img:b")
    assert twin.key(base, "img:a") != twin.key(base.replace(epochs=4), "img:a")
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with_script = base.replace(script=str(script))
    before = twin.key(with_script, "img:a")
    script.write_text("print(2)\n")
    assert twin.key(with_script, "img:a") != before  # an edited script has another twin
    plain = twin.twin_settings(base.replace(scenario="pause", heal="20", at="step:9"), "img:a")
    assert (plain.scenario, plain.heal, plain.at, plain.verdict) == ("kill", "5", "epoch:2", "off")
    assert plain.run == twin.twin_id(base, "img:a") and plain.epochs == 5

def test_the_twin_key_lists_the_script_folder_and_data_but_not_the_runs(tmp_path):
    """A SCRIPT's tasks read its folder's modules and DATA: either edited makes another twin; a
    run written into the runs folder inside the script's folder does not, nor a cache."""
    (tmp_path / "job").mkdir()
    (tmp_path / "data").mkdir()
    script, module, data = tmp_path / "job/train.py", tmp_path / "job/model.py", tmp_path / "data/x.csv"
    for path in (script, module, data):
        path.write_text("1\n")
    settings = Settings(script=str(script), data=str(tmp_path / "data"), runs_dir=str(tmp_path / "job/runs"))
    before = twin.key(settings, "img:a")
    (tmp_path / "job/runs/20261207-000000-aaaa").mkdir(parents=True)
    (tmp_path / "job/runs/20261207-000000-aaaa/summary.json").write_text("{}")
    (tmp_path / "job/__pycache__").mkdir()
    (tmp_path / "job/__pycache__/model.pyc").write_text("x")
    assert twin.key(settings, "img:a") == before
    module.write_text("22\n")
    after_module = twin.key(settings, "img:a")
    assert after_module != before
    data.write_text("333\n")
    assert twin.key(settings, "img:a") != after_module
    assert twin.key(settings.replace(data=""), "img:a") != twin.key(settings, "img:a")
    beside = settings.replace(runs_dir=str(tmp_path / "job"))  # the runs folder is the script's own
    before = twin.key(beside, "img:a")
    (tmp_path / "job/twin-0123456789abcdef").mkdir()
    assert twin.key(beside, "img:a") == before


def test_a_huge_script_folder_is_listed_only_so_far(tmp_path, monkeypatch):
    monkeypatch.setattr(twin, "LISTED_MOST", 3)
    for index in range(5):
        (tmp_path / f"f{index}").write_text("")
    assert twin.listing(tmp_path, tmp_path / "runs").splitlines()[-1] == "and more"
    assert len(twin.listing(tmp_path, tmp_path / "runs").splitlines()) == 4


def test_the_twin_is_found_by_twin_or_its_key_and_refused_in_words(tmp_path):
    settings = Settings(runs_dir=str(tmp_path), epochs=5, twin="ref")
    assert twin.found(settings, "img")[1] == f"TWIN=ref has no summary.json in {tmp_path}"
    assert twin.found(settings.replace(twin=""), "img")[1].startswith("none yet for these settings on this image")
    assert twin.found(settings.replace(twin="", verdict="off"), "img")[1].endswith("(VERDICT=off runs none)")
    cached = tmp_path / twin.twin_id(settings, "img")
    runfolder.make(cached, link_latest=False, owner=True)
    assert "it is running, or was stopped" in twin.found(settings.replace(twin=""), "img")[1]
    undisturbed(run=cached.name).write(cached)
    found, why = twin.found(settings.replace(twin=""), "img")
    assert why == "" and found is not None and found.run == cached.name
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "summary.json").write_text("[1, 2]")
    found, why = twin.found(settings, "img")
    assert found is None and "is not a summary the lab wrote" in why


def test_the_twin_is_run_only_for_a_run_that_finished_with_its_fault():
    settings = Settings()
    assert twin.wanted(settings, summary(chaos=CHAOS))
    assert not twin.wanted(settings.replace(verdict="off"), summary(chaos=CHAOS))
    assert not twin.wanted(settings.replace(twin="ref"), summary(chaos=CHAOS))
    assert not twin.wanted(settings, summary(ok=False, outcome="failed", chaos=CHAOS))
    assert not twin.wanted(settings, summary(chaos={**CHAOS, "injected": False}))


def test_the_tolerance_sits_between_rounding_and_a_repeated_batch():
    assert 4e-5 < verdict.RTOL < 2e-3  # FACTS.md's largest rounding; MID_EPOCH_RTOL's measured 0.2 %
    assert verdict.close("x", 1.0, 1.0 + 0.5 * verdict.RTOL, 1.0)[2] <= 1
    assert verdict.close("x", 1.0, 1.0 + 2 * verdict.RTOL, 1.0)[2] > 1
    assert verdict.close("x", float("nan"), 1.0, 1.0)[2] == math.inf


def logged(run_dir, task, restarted=True):
    """A trainer's log as the lab's trainer writes it: 3 epochs, killed, restored at epoch 4, the end."""
    log = schema.EventLog(runfolder.log_path(runfolder.task_space(run_dir), task), task)
    start = dict(role="trainer", strategy="multiworker", cluster={}, versions={}, settings={}, baseline_loss=30.0)
    log.emit("start", **start)
    for epoch in range(1, 4 if restarted else 6):
        log.emit("epoch", epoch=epoch, loss=1.0, seconds=0.1, steps=STEPS)
    if restarted:
        log.emit("start", **start)
        log.emit("restored", epoch=4, step=0)
        for epoch in (4, 5):
            log.emit("epoch", epoch=epoch, loss=1.0, seconds=0.1, steps=STEPS)


def test_make_chaos_runs_the_missing_twin_once_and_writes_the_verdict(tmp_path, monkeypatch, capsys):
    settings = Settings(runs_dir=str(tmp_path), run="c1", epochs=5, examples=2048, scenario="kill", target="worker-1")
    run_dir = tmp_path / "c1"
    runfolder.make(run_dir, link_latest=False, owner=True)
    for task in ("worker-0", "worker-1"):
        logged(run_dir, task)
    fault = chaos.Chaos(settings)
    fault.image = "tflab-trainer:cpu-0123456789ab"
    first = fault.verdict(run_dir, summary(chaos=CHAOS, settings=settings.to_dict()))
    assert first["kind"] == "no twin" and "make chaos runs it once after a run that finished ok" in first["words"]
    summary(run="c1", chaos={**CHAOS, "verdict": first}, settings=settings.to_dict()).write(run_dir)
    made = []

    def up(twin_settings, link_latest=True, observer=None):
        made.append(twin_settings)
        folder = tmp_path / twin_settings.run
        runfolder.make(folder, link_latest=False, owner=True)
        undisturbed(run=twin_settings.run, settings=twin_settings.to_dict()).write(folder)
        return 0

    monkeypatch.setattr(twin.runner, "up", up)
    chaos.judged_again(settings.replace(verdict="off"), fault, run_dir)
    assert made == []  # VERDICT=off runs none
    chaos.judged_again(settings, fault, run_dir)
    assert [s.run for s in made] == [twin.twin_id(settings, fault.image)] and made[0].scenario == "kill"
    judged = Summary.read(run_dir).chaos["verdict"]
    assert (judged["kind"], judged["twin"], judged["steps_repeated"]) == ("equivalent", made[0].run, 0), judged
    assert f"chaos: verdict: equivalent: {judged['words']}" in capsys.readouterr().out
    chaos.judged_again(settings, fault, run_dir)  # judged: the twin is not run again
    assert len(made) == 1
    again = fault.verdict(run_dir, summary(chaos=CHAOS, settings=settings.replace(run="c2").to_dict()))
    assert again["kind"] == "equivalent" and again["twin"] == made[0].run  # a second chaos run reuses it


def test_a_twin_that_is_none_is_refused_in_one_line_before_the_run(tmp_path, monkeypatch):
    settings = Settings(runs_dir=str(tmp_path), epochs=5, scenario="kill", twin="ref")
    monkeypatch.setattr(chaos.runner, "up", lambda *args, **kwargs: pytest.fail("the run started"))
    with pytest.raises(LabError) as refused:
        chaos.chaos(settings)
    assert str(refused.value) == (f"TWIN=ref is not allowed: it has no summary.json in {tmp_path}; expected a "
                                  "finished run of the same settings without the fault, in RUNS_DIR (or leave TWIN "
                                  "out for the lab's own twin)")
    runfolder.make(tmp_path / "ref", link_latest=False, owner=True)
    undisturbed(run="ref", settings=settings.replace(epochs=3).to_dict()).write(tmp_path / "ref")
    with pytest.raises(LabError, match=r"^TWIN=ref is not allowed: was run with other settings: EPOCHS=3, not 5;"):
        twin.check(settings)
    runfolder.make(tmp_path / "hit", link_latest=False, owner=True)
    summary(run="hit", chaos=CHAOS, settings=settings.to_dict()).write(tmp_path / "hit")
    with pytest.raises(LabError, match="it is a chaos run itself"):
        twin.check(settings.replace(twin="hit"))
    runfolder.make(tmp_path / "good", link_latest=False, owner=True)
    undisturbed(run="good", settings=settings.replace(scenario="pause", heal="20", run="good").to_dict()).write(
        tmp_path / "good")
    twin.check(settings.replace(twin="good"))  # the fault's own settings and its name differ: a twin


@pytest.mark.parametrize("hostile", [None, "x", [], [1], [{**KERNEL, "size": True}], [{**KERNEL, "l2": None}],
                                     [{**KERNEL, "name": 3}], [{**KERNEL, "size": -1}], [KERNEL] * 10_001])
def test_a_hostile_fingerprint_never_reaches_the_summary(hostile):
    assert summary_module.fingerprint_of({"weights_fingerprint": hostile}) is None


def test_the_trainers_fingerprint_is_its_summary_rows():
    end = {"event": "end", "task": "worker-0", "time": 9.0, "role": "trainer", "total_seconds": 1.0,
           "peak_rss_bytes": 1, "final_loss": 0.84, "first_step_seconds": 0.1, "first_step_at": 2.0,
           "steady_step_seconds": 0.01, "weights_sha256": "ab" * 32, "parameters": 330,
           "weights_fingerprint": [{**KERNEL, "extra": "dropped"}, {**BIAS, "sum": "nan"}]}
    found = summary_module.task_row("worker-0", "trainer", [end], 0, False, Settings())
    assert found.weights_fingerprint == [KERNEL, {**BIAS, "sum": "nan"}]


def test_a_job_that_trains_differently_each_time_has_no_twin_to_judge_it():
    """make chaos-grid on the Keras tutorial's script (no seed): every cell came out "lossy" against
    a twin whose first epoch, long before any fault, had already ended elsewhere. Its first epoch is
    now held against the twin's first: where they differ, no twin can judge the resume."""
    unseeded = undisturbed(tasks=[row("worker-0", losses=[1.3, 0.9]), row("worker-1", losses=[1.3, 0.9])])
    found = judge(summary(chaos=CHAOS), events(), unseeded)
    assert found["kind"] == "no twin", found
    assert found["words"].startswith("the job does not train the same way twice: worker-0's first epoch ended at 1 "
                                     "against 1.3 in the undisturbed run twin-1, before any fault; seed it"), found
    seeded = undisturbed(tasks=[row("worker-0", losses=[1.0, 0.9]), row("worker-1", losses=[1.0, 0.9])])
    assert judge(summary(chaos=CHAOS), events(), seeded)["kind"] == "equivalent"


def test_a_custom_loop_that_logs_no_loss_nor_weights_is_not_called_lossy():
    """The custom-loop tutorial's script logs no Keras epoch and no weights: its verdict was "lossy"
    on "final loss None against None"; and its restart read as "no task restarted"."""
    def silent(task):
        return {**row(task, loss=None), "weights_sha256": None, "weights_fingerprint": None}

    no_epochs = {task: [{"event": "start", "time": 1.0}, {"event": "start", "time": 5.0}]
                 for task in ("worker-0", "worker-1")}
    found = judge(summary(chaos=CHAOS, tasks=[silent("worker-0"), silent("worker-1")]), no_epochs,
                  undisturbed(tasks=[silent("worker-0"), silent("worker-1")]))
    assert found["kind"] == "no twin", found
    assert found["words"].startswith("nothing the lab reads to compare with the undisturbed run twin-1: worker-0's "
                                     "final loss unchecked: neither run logged one"), found
    assert "restarted, and no task logged where it resumed" in found["words"], found


def test_a_run_the_lab_was_stopped_in_is_interrupted_with_no_verdict_on_the_fault():
    """SIGTERM to the lab mid-run: it kills every task itself (exit 137), and the run read "ended
    cleanly" with "verdict: failed: worker-0 exited 137" (issue 56): the exits were the lab's stop."""
    stopped = [row("worker-0", status="stopped", exit_code=137), row("worker-1", status="stopped", exit_code=137)]
    stall = {"kind": "waiting", "what": "worker-0 was in its all-reduce", "fix": "-", "moment": "SIGTERM to the lab"}
    outcome = chaos.outcome_of({"ok": False, "outcome": "interrupted", "tasks": stopped})
    run = summary(ok=False, outcome="interrupted", tasks=stopped, stall=stall, chaos={**CHAOS, "outcome": outcome})
    found = judge(run, events(), None, "none yet")
    assert found["kind"] == "interrupted"
    assert found["words"] == ("the lab was stopped (SIGTERM to the lab) before the run ended, and stopped its tasks "
                              "itself: no verdict on the fault's resume; run it again to judge it")
    run.chaos = {**run.chaos, "verdict": found}
    said = table.table(run)
    assert "chaos: kill on worker-1 at epoch:2: interrupted; " in said
    assert "ended cleanly" not in said and "verdict: failed" not in said and "exited 137" not in said
    assert "chaos: verdict: interrupted: the lab was stopped (SIGTERM to the lab)" in said


def test_a_replay_is_judged_without_a_twin_and_says_what_twin_can_do(tmp_path, monkeypatch, offline):
    """A replay never gets a twin (twin.wanted), yet its verdict said "no twin: no twin: none yet
    for these settings on this image: make chaos runs it once", and "unchecked for a script" of a
    job that is no script (issue 56). Here the replay's run is the runner's own on a stand-in."""
    import dataclasses

    from labtest.fakes import FakeEngine
    from test_chaos_landing import fake_up
    from tflab import replay
    from tflab.core import cluster

    FakeEngine(monkeypatch)
    settings = Settings(workers=2, runs_dir=str(tmp_path), run="r1", at="epoch:1", tfjob="tfjob.yaml")
    monkeypatch.setattr(replay, "up", lambda settings, given, observer: fake_up(epochs_logged=3)(
        settings, observer=observer(dataclasses.replace(cluster.build(settings), replayed_from="TFJOB"))))
    assert chaos.chaos(settings) == 0
    result = Summary.read(tmp_path / "r1")
    found = result.chaos["verdict"]
    assert found["kind"] == "no twin" and found["words"].startswith(
        "make chaos runs no twin of a replayed TFJOB, so it is judged without one; TWIN=<run> names an undisturbed "
        "replay of the same manifest to compare with; ")
    said = table.table(result)
    assert "chaos: verdict: no twin: make chaos runs no twin of a replayed TFJOB" in said
    assert "no twin: no twin" not in said and "make chaos runs it once" not in said
    assert "unchecked for a script" not in said
    assert "chaos: unchecked for a replayed job: weights: the replayed TFJOB logs no digest of its weights" in said


def test_twin_may_name_an_undisturbed_replay_of_the_same_manifest(tmp_path):
    """A replay records what its manifest says (tfjob.replay_settings), not the lab's defaults: TWIN=
    naming an undisturbed replay of the very manifest was refused, "ALLREDUCE_PROBE=(unset), not 0"."""
    manifest = tmp_path / "tfjob.yaml"
    manifest.write_text("")
    replayed = {"strategy": "multiworker", "workers": 2, "ps": 0, "chief": 0, "evaluator": 0, "run": "ref",
                "runs_dir": str(tmp_path), "backend": "compose", "timeout": None, "restarts": None,
                "tfjob": str(manifest)}
    runfolder.make(tmp_path / "ref", link_latest=False, owner=True)
    summary(run="ref", settings=replayed).write(tmp_path / "ref")
    settings = Settings(runs_dir=str(tmp_path), scenario="kill", tfjob=str(manifest), twin="ref")
    twin.check(settings)  # accepted: the same manifest, undisturbed, finished ok
    other = tmp_path / "other.yaml"
    with pytest.raises(LabError, match=rf"^TWIN=ref is not allowed: it replayed {manifest}, not {other}; "):
        twin.check(settings.replace(tfjob=str(other)))
    runfolder.make(tmp_path / "own", link_latest=False, owner=True)
    undisturbed(run="own").write(tmp_path / "own")
    with pytest.raises(LabError, match=r"^TWIN=own is not allowed: it is no replay \(make chaos TFJOB= or "):
        twin.check(settings.replace(twin="own"))
    # the verdict then holds the two replays' records to each other, the fault's own settings aside
    ours = summary(chaos=CHAOS, settings={**replayed, "run": "r1", "scenario": "kill", "at": "epoch:2"})
    assert verdict.twin_problem(ours, summary(run="ref", settings=replayed), twin.ignored()) is None
    other_shape = summary(run="ref", settings={**replayed, "workers": 3})
    assert verdict.twin_problem(ours, other_shape, twin.ignored()) == \
        "ref was run with other settings: WORKERS=3, not 2"
