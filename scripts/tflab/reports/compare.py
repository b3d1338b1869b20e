"""`make compare`: one run per COMPARE entry (and per PRECISIONS), side by side in one folder, then the report
of them all."""

from __future__ import annotations

from tflab import backends
from tflab.console import display_path, say
from tflab.core import runfolder
from tflab.core.grammars import COMPARE_ENTRY
from tflab.core.settings import Settings, SettingsError
from tflab.reports import report
from tflab.supervisor import runner


def compare_runs(settings: Settings) -> list[tuple[str, Settings]]:
    """(label, settings) for each COMPARE entry, each checked: `mirrored-4` is STRATEGY=mirrored
    REPLICAS=4, `parameter-server-2` is STRATEGY=parameter_server WORKERS=2 (and PS). With several
    PRECISIONS, each entry once per precision, side by side: mirrored-4-float32, mirrored-4-mixed-float16."""
    runs = []
    precisions = (settings.precisions or settings.precision).split()
    for match in filter(None, map(COMPARE_ENTRY.fullmatch, settings.compare.split())):  # each, as COMPARE checked
        strategy = (match.group(1) or match.group(2)).replace("-", "_")
        count = int(match.group(3) or 1)
        size = {"mirrored": {"replicas": count}, "single": {}}.get(strategy, {"workers": count})
        for precision in precisions:
            label = match.group(0) + (f"-{precision.replace('_', '-')}" if len(precisions) > 1 else "")
            try:
                runs.append((label, settings.replace(strategy=strategy, run=label, precision=precision, **size)))
            except SettingsError as error:
                raise SettingsError(f"COMPARE entry {label}: {error}") from None
    return runs


def compare(settings: Settings) -> int:
    entries = compare_runs(settings)
    folder = runfolder.planned(settings)
    backends.check_engine(settings)
    runfolder.make(folder, link_latest=True)
    labels = [label for label, _ in entries]
    runfolder.write_json(folder / runfolder.COMPARE, {"settings": settings.to_dict(), "runs": labels})
    codes: list[int] = []
    for label, entry in entries:
        say(f"--- compare {folder.name}: {label} ({len(codes) + 1} of {len(entries)})")
        codes.append(runner.up(entry.replace(runs_dir=str(folder)), link_latest=False))
    found, written = report.write(folder)
    print(report.table(found))
    say("wrote " + ", ".join(display_path(path) for path in written))
    if not any(path.suffix == ".png" for path in written):
        say(report.PNG_SKIPPED)
    return 0 if all(code == 0 for code in codes) else 1
