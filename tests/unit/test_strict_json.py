"""summary.json and matrix.json are strict JSON, which jq and every other reader take, even where a
loss went NaN (issue 36: a NaN run is no green run, and its record must still be readable): a
non-finite loss is written as the word the task logs use ("nan", "inf", "-inf") and read back as
the float."""

import json
import math

from tflab.core.runsummary import Summary, TaskRow


def test_a_nan_loss_is_written_as_its_word_and_read_back_as_nan(tmp_path):
    row = TaskRow(task="w", status="ok", losses=[1.0, float("nan")], final_loss=float("nan"))
    s = Summary(run="r", strategy="single", backend="compose", outcome="ok", ok=True, launched_at=1.0,
                wall_seconds=1.0, settings={}, weights_agree=True, tasks=[row])
    s.write(tmp_path)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and '"nan"' in text
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    back = Summary.read(tmp_path)
    assert math.isnan(back.tasks[0].final_loss) and math.isnan(back.tasks[0].losses[1])
