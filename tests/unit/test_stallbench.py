"""make bench BENCH=stall's pure logic: the stalls drawn from a seed, what counts as named correctly,
the tally, the largest gap between advances and the cost line. Its figures are the bench's to
print (reports/stallbench.py), never asserted here."""

import json

import pytest
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.reports import stallbench
from tflab.reports.stallbench import Injection


def test_the_same_seed_draws_the_same_stalls_and_another_seed_others():
    drawn = stallbench.draw(seed=3, count=10, workers=2, epochs=10)
    assert drawn == stallbench.draw(seed=3, count=10, workers=2, epochs=10)
    assert drawn != stallbench.draw(seed=4, count=10, workers=2, epochs=10)


def test_stalls_alternate_trainer_and_script_within_their_bounds():
    seen = set()
    for seed in range(50):
        drawn = stallbench.draw(seed=seed, count=6, workers=3, epochs=5)
        assert [d.where for d in drawn] == ["trainer", "script"] * 3
        for d in drawn:
            seen.add((d.where, d.how, d.worker))
            assert 0 <= d.worker < 3
            if d.where == "trainer":  # after epoch 1 to EPOCHS-2: the hang lands with training left
                assert d.how == "hang" and 1 <= d.at <= 3
            else:  # after the run's second advance, before the script's last epoch
                assert d.how in ("callback", "pipeline")
                assert 2 <= d.at < (stallbench.SCRIPT_EPOCHS - 1) * stallbench.SCRIPT_STEPS
    # every kind of stall on every worker comes up over these seeds
    assert {(where, how) for where, how, _ in seen} == {("trainer", "hang"), ("script", "callback"),
                                                          ("script", "pipeline")}
    assert {worker for *_, worker in seen} == {0, 1, 2}


HANG = Injection("trainer", "hang", 1, 4)


@pytest.mark.parametrize("stall, correct", [
    ({"moment": "stall", "kind": "hang", "what": "worker-1 stopped in a hang on purpose; worker-0 waits"}, True),
    ({"moment": "stall", "kind": "hang", "what": "worker-0 stopped in a hang on purpose"}, False),  # the wrong task
    ({"moment": "stall", "kind": "stuck-task", "what": "worker-1 stopped in its own code"}, False),  # the wrong kind
    ({"moment": "TIMEOUT", "kind": "hang", "what": "worker-1 stopped in a hang on purpose"}, False),  # not a stall
    (None, False),
])
def test_a_finding_is_named_correctly_only_with_its_kind_its_task_and_at_a_stall(stall, correct):
    assert stallbench.named_correctly(HANG, stall) is correct


def test_each_way_of_stalling_expects_its_own_kind():
    assert Injection("script", "callback", 0, 9).expected == "stuck-callback"
    assert Injection("script", "pipeline", 0, 9).expected == "stuck-input-pipeline"
    assert HANG.expected == "hang"
    assert Injection("script", "callback", 1, 37).words() == \
        "script: callback blocks on worker-1 at step 37 (epoch 3, batch 5)"


def test_the_tally_counts_the_correct_ones():
    assert stallbench.tally([{"correct": True}, {"correct": False}, {"correct": True}]) == "2 of 3 named correctly"


def test_the_largest_gap_is_between_advances_of_any_trainer():
    records = [{"event": "start", "time": 100.0}, {"event": "fit", "time": 110.0}, {"event": "epoch", "time": 150.0},
               {"event": "epoch", "time": 152.0}]
    times = {"worker-0": stallbench.advance_times(records), "worker-1": [151.0, 170.0]}
    assert times["worker-0"] == [110.0, 150.0, 152.0]  # start is no advance: the wait before the first is not a gap
    assert stallbench.largest_gap(times) == pytest.approx(40.0)
    assert stallbench.largest_gap({"worker-0": [5.0]}) is None


def test_the_cost_line_is_the_ratio_of_the_medians_of_the_pairs_both_ended():
    pairs = [{"auto": 0.012, "off": 0.010}, {"auto": 0.011, "off": 0.011}, {"auto": 0.013, "off": None},
             {"auto": 0.010, "off": 0.012}]
    line, = stallbench.cost_lines(pairs)
    assert line.startswith("STALL=auto / off steady step, multiworker 2 fit: 1.000  "
                           "(medians 11.00 vs 11.00 ms over 3 pairs")
    assert "ratio pair by pair 0.83 to 1.20" in line
    assert stallbench.cost_lines([{"auto": None, "off": 0.01}])[0].endswith("both ended with a steady step)")


def test_a_hangs_onset_is_its_injection_from_the_chaos_log(tmp_path):
    injected = {"event": "injected", "time": 1234.5, "target": "worker-1"}
    (tmp_path / "chaos.jsonl").write_text(json.dumps(injected) + "\n")
    assert stallbench.onset(HANG, tmp_path, found_at=1300.0) == 1234.5


def test_the_stall_bench_refuses_what_it_cannot_run_in_one_line():
    with pytest.raises(LabError, match="WORKERS=1 is not allowed with make bench BENCH=stall: expected 2 or more"):
        stallbench.plan(Settings().replace(bench="stall", workers=1))
    with pytest.raises(LabError, match="EPOCHS=2 is not allowed with make bench BENCH=stall: expected 3 or more"):
        stallbench.plan(Settings().replace(bench="stall", epochs=2))
