"""`make migrate TFJOB=`: the TFJob `make k8s` writes, replayed as it is and as the TrainJob `tflab k8s
TFJOB=` turns it into, with no fault: both train the same program on the same data, so their end,
restarts, files, losses and weights are the same, and what differs is what the two controllers do
differently: the TF_CONFIG (the operator's Service names against JobSet's pod names), the job's
condition (TFJob Succeeded against TrainJob Complete) and who would restart it."""

import json
import logging
import time

from labtest.cli import lab_env, run_lab
from labtest.runs import engine_objects

SAME = dict(STRATEGY="multiworker", WORKERS=2, SEED=0, GLOBAL_BATCH=64, EXAMPLES=1024, EPOCHS=2)
TASKS = ("worker-0", "worker-1")
log = logging.getLogger("tflab.tests")


def test_a_tfjob_and_its_trainjob_replayed_side_by_side(lab, trainer_image):
    written = run_lab("k8s", env=lab_env(RUNS_DIR=str(lab.runs_dir), RUN="migrate-k8s", K8S_PVC="out", BACKUP="off",
                                         **{k: str(v) for k, v in SAME.items()}))
    assert written.returncode == 0, written.output
    tfjob = lab.runs_dir / "migrate-k8s" / "tfjob.yaml"
    started = time.monotonic()
    result = run_lab("migrate", f"TFJOB={tfjob}", f"RUNS_DIR={lab.runs_dir}", "RUN=migrate", env=lab_env())
    log.info("make migrate of a 2-worker TFJob took %.1f s (both replays)", time.monotonic() - started)
    assert result.returncode == 0, result.output
    folder = lab.runs_dir / "migrate"
    assert engine_objects(folder) == []

    # The TrainJob is exactly what `tflab k8s TFJOB=` writes for the same TFJob.
    converted = run_lab("k8s", f"TFJOB={tfjob}", f"RUNS_DIR={lab.runs_dir}", "RUN=migrate-converted", env=lab_env())
    assert converted.returncode == 0, converted.output
    assert (folder / "trainjob.yaml").read_text() == (lab.runs_dir / "migrate-converted" / "trainjob.yaml").read_text()

    record = json.loads((folder / "migrate.json").read_text())
    rows = {row["what"]: row for row in record["rows"]}
    assert record["fault"] is None and record["same_end"] is True
    for same in ("end", "restarts", "files written", "weights", *[f"losses {task}" for task in TASKS]):
        assert rows[same]["same"] and rows[same]["cause"] == "same", rows[same]
    assert rows["end"]["tfjob"] == "ok" and rows["restarts"]["tfjob"] == "0"
    assert rows["files written"]["tfjob"] != "0 files"  # the claim `out` holds each worker's log
    assert rows["weights"]["tfjob"].startswith("every task ")
    assert all(len(rows[f"losses {task}"]["tfjob"].split()) == SAME["EPOCHS"] for task in TASKS)
    for index, task in enumerate(TASKS):
        tf_config = rows[f"TF_CONFIG {task}"]
        assert not tf_config["same"] and "genClusterSpec" in tf_config["cause"], tf_config
        assert json.loads(tf_config["tfjob"])["cluster"]["worker"][index] == f"tflab-worker-{index}.default.svc:2222"
        assert json.loads(tf_config["trainjob"])["cluster"]["worker"][index] == f"tflab-node-0-{index}.tflab:2222"
        # what the replays recorded is what each replica got
        for side in ("tfjob", "trainjob"):
            config = json.loads((folder / side / "config.json").read_text())
            assert config["tf_config"][task] == json.loads(tf_config[side])
    assert (rows["condition"]["tfjob"], rows["condition"]["trainjob"]) == ("Succeeded (TFJobSucceeded)", "Complete")
    assert "failurePolicy.maxRestarts" in rows["restarted by"]["cause"]
    assert "| end | ok | same | same |" in (folder / "migrate.md").read_text()
    assert "why: " in result.stdout and record["summary"] in result.stdout
    log.info("make migrate's table:\n%s", (folder / "migrate.md").read_text())
