"""make matrix's verdict: the one line a person can act on, read from the cells (matrix.Cell:
tf, keras, strategy, outcome, signature, final_loss): what breaks where, from which Keras release and
where it is fixed, what passes. Pure: it reads cells and writes nothing.
"""

from __future__ import annotations

from tflab.core import versions

NOT_A_RUN = ("n/a", "not installable")  # cells that never run, and are no failure of the matrix
# A failure that says the cell's Keras cannot do its strategy at all (explain.py): the cell is n/a with
# that reason, not failed, as a Keras a TF cannot have is.
NOT_APPLICABLE_SIGNATURES = ("keras3-parameter-server",)
LOSS_AGREEMENT = 1e-3  # relative: final losses this close across cells "agree"
# A mixed_float16 cell of Keras 3 over several replicas whose loss went NaN. Measured on 2 logical CPUs (TF 2.21,
# the lab's mlp, 3 epochs, 2026-12-07): Keras 3.15.1 NaN from epoch 1 on mirrored-2 and trained on one device,
# tf-keras trained on both; a custom loop of Keras 3 went NaN the same way, and trained once it all-reduced its
# gradients before apply_gradients. Keras 3's LossScaleOptimizer (_tf_apply, keras#18691, the fix of keras#18666's
# merge_call failure) takes the first replica's finite check for every replica's gradients; keras-nightly
# 3.16.0.dev2026102704 went NaN the same way. The settings refuse it up front under every Keras 3 the lab pins
# (rules.keras3_loss_scale_refusal: those cells are n/a); a SCRIPT's or a replayed job's NaN is named so.
KERAS3_LOSS_SCALE = ("keras3-loss-scale-nan",
                     "Keras 3's LossScaleOptimizer under a strategy of several replicas went NaN: it checks only the "
                     "first replica's gradients for inf or NaN (its _tf_apply assumes them all-reduced, keras#18691 "
                     "for keras#18666) though Keras 3 reduces them later, so a step where another replica's float16 "
                     "gradients overflowed is applied",
                     "KERAS=tf-keras (its LossScaleOptimizer reduces the gradients first: measured to train), or "
                     "PRECISION=mixed_bfloat16, which scales no loss, or float32")


def keras3_loss_scale_nan(cell) -> bool:
    """A NaN cell KERAS3_LOSS_SCALE explains: mixed_float16, Keras 3 imported, mirrored (as measured; Keras 3's
    fit fails under multiworker before any step, keras3-multiworker)."""
    return cell.precision == "mixed_float16" and cell.strategy == "mirrored" and \
        (cell.keras_imported or "").startswith("keras ")


def keras_head(keras: str) -> str:
    """A Keras in the grid and the verdict: tf-keras, keras3, Keras 3.12, nightly."""
    return f"Keras {keras}" if versions.is_keras_release(keras) and keras != "nightly" else keras


def releases_verdict(cells: list) -> list[str]:
    """Where a failure starts and where it is fixed, along the Keras releases each TF x strategy ran
    with (KERAS=3.12 3.15 nightly): "mirrored on 2.21: breaks from Keras 3.14 (exception); fixed in
    nightly (3.16.0.dev2026102704, 2026-10-27)". Only what ran speaks: a release not in the matrix
    is not guessed at."""
    rows: dict[tuple[str, str], list] = {}
    for cell in cells:
        if versions.is_keras_release(cell.keras) and cell.outcome in ("ok", "failed", "timed out"):
            rows.setdefault((cell.strategy, cell.tf), []).append(cell)
    parts = []
    for (strategy, tf), row in rows.items():
        row.sort(key=lambda cell: versions.keras_release_key(cell.keras))
        bad = [index for index, cell in enumerate(row) if cell.outcome != "ok"]
        if not bad:
            continue
        first, last = bad[0], bad[-1]
        whys = list(dict.fromkeys(cell.signature or cell.outcome for cell in row if cell.outcome != "ok"))
        why = f" ({', '.join(whys)})"
        if first > 0:
            text = f"breaks from {keras_head(row[first].keras)}{why}"
        else:
            text = f"fails on {keras_head(row[first].keras)}, the oldest Keras run{why}"
        between = [keras_head(cell.keras) for cell in row[first:last] if cell.outcome == "ok"]
        if between:
            text += f", passes on {', '.join(between)} between"
        if last < len(row) - 1:
            text += f"; fixed in {versions.keras_label(row[last + 1].keras)}"
        else:
            text += f"; not fixed up to {versions.keras_label(row[last].keras)}, the newest Keras run"
        several = len({cell.tf for cell in cells}) > 1  # else the verdict's span names the one TF
        parts.append(f"{strategy}{f' on {versions.label(tf)}' if several else ''}: {text}")
    return parts


def verdict(cells: list) -> str:
    """One line a person can act on: what breaks, where (and from which Keras release, and where
    it is fixed), and what passes."""
    ran = [cell for cell in cells if cell.outcome not in NOT_A_RUN]
    tfs = list(dict.fromkeys(versions.label(cell.tf) for cell in cells))
    span = f"{tfs[0]} → {tfs[-1]}" if len(tfs) > 1 else tfs[0]
    parts = releases_verdict(cells)
    broken: dict[tuple[str, str, str, bool], list[str]] = {}  # (strategy, keras, why, wrong) -> TF lines
    unfinished = [cell for cell in ran if cell.outcome in ("interrupted", "not run")]
    for cell in ran:
        if cell.outcome not in ("ok", "interrupted", "not run") and not versions.is_keras_release(cell.keras):
            broken.setdefault((cell.strategy, cell.keras, cell.signature or cell.outcome, cell.outcome == "wrong"),
                              []).append(versions.label(cell.tf))
    for (strategy, keras, why, wrong), where in broken.items():
        issue = " (keras#20585)" if why == "keras3-multiworker" else ""
        does = "ends ok and trains wrong" if wrong else "breaks"
        parts.append(f"{strategy} {does} under {keras} on {', '.join(where)}: {why}{issue}")
    if unfinished:
        parts.append(f"interrupted: {len(unfinished)} cell(s) did not finish")
    if ran and all(cell.outcome == "ok" for cell in ran):
        parts.append("every cell passes")
    else:
        for keras in dict.fromkeys(cell.keras for cell in ran if not versions.is_keras_release(cell.keras)):
            own = [cell for cell in ran if cell.keras == keras]
            if all(cell.outcome == "ok" for cell in own) and len(own) < len(ran):
                parts.append(f"with {keras} every cell passes")
    losses = [cell.final_loss for cell in ran if cell.outcome == "ok" and cell.final_loss is not None]
    if len(losses) > 1:
        spread = (max(losses) - min(losses)) / max(abs(min(losses)), 1e-12)
        parts.append("final losses identical" if spread == 0 else f"final losses agree to {spread:.0e}"
                     if spread <= LOSS_AGREEMENT
                     else f"final losses differ by up to {spread:.1%} (matrix.md: per epoch)")
    not_installable = [keras_head(cell.keras) for cell in cells if cell.outcome == "not installable"]
    if not_installable:
        parts.append(f"not installable (pip): {', '.join(dict.fromkeys(not_installable))}")
    not_applicable = [cell for cell in cells if cell.outcome == "n/a"]
    if not_applicable:
        whys = list(dict.fromkeys(cell.signature for cell in not_applicable if cell.signature))
        parts.append(f"{len(not_applicable)} cell(s) n/a" + (f" ({', '.join(whys)})" if whys else ""))
    if not ran:
        parts.append("no cell can run")
    return f"{span}: " + "; ".join(parts)
