"""The commands that train, or lay out what a training would be: up and stack-up, compare, matrix,
bench, chaos, soak and migrate; the simulated swarm's (the cli's one call into tools/); config and k8s,
which print or write the cluster a run would get and start nothing."""

from __future__ import annotations

import json

from tflab import backends
from tflab.core.settings import Settings
from tflab.k8s import writer as k8s
from tflab.reports import compare
from tflab.supervisor import runner


def command_up(settings: Settings, given: dict[str, str] | None = None) -> int:
    """given: the settings the user gave (given_values), which a TFJob replay refuses where the TFJob decides."""
    if settings.tfjob or settings.trainjob:
        from tflab import replay  # PyYAML is needed only here

        return replay.up(settings, given)
    return runner.up(settings)


def command_compare(settings: Settings) -> int:
    return compare.compare(settings)


def command_matrix(settings: Settings, given: dict[str, str] | None = None) -> int:
    from tflab.reports import matrix

    return matrix.matrix(settings, given or {})


def command_bench(settings: Settings) -> int:
    from tflab.reports import bench

    return bench.bench(settings)


def command_chaos(settings: Settings, given: dict[str, str] | None = None) -> int:
    """given: as command_up's, for a replayed job's (TFJOB=, TRAINJOB=) refusals."""
    from tflab.faults import chaos

    return chaos.chaos(settings, given)


def command_chaos_grid(settings: Settings) -> int:
    from tflab.faults import grid

    return grid.grid(settings)


def command_soak(settings: Settings) -> int:
    from tflab.faults import soak

    return soak.soak(settings)


def command_stack_up(settings: Settings) -> int:
    return runner.up(settings.replace(backend="swarm"))


def command_swarm_sim(settings: Settings) -> int:
    from tflab.tools import swarmsim

    return swarmsim.up(settings)


def command_swarm_sim_down(settings: Settings) -> int:
    from tflab.tools import swarmsim

    return swarmsim.down(settings)


def command_config(settings: Settings) -> int:
    """Prints the resolved settings, the cluster spec and each task's TF_CONFIG, as JSON."""
    the_cluster, note = backends.config_cluster(settings)
    print(json.dumps({"settings": settings.to_dict(), "addresses": note, "cluster": the_cluster.spec}, indent=2))
    for task in the_cluster.tasks:
        tf_config = json.dumps(the_cluster.tf_config(task)) if the_cluster.spec else "(none: one process)"
        print(f"{task}: TF_CONFIG={tf_config}")
    return 0


def command_k8s(settings: Settings) -> int:
    if settings.tfjob:  # a TFJob as the equivalent TrainJob
        from tflab.k8s import fromtfjob  # PyYAML is needed only here

        return fromtfjob.from_tfjob(settings)
    return k8s.write(settings)


def command_migrate(settings: Settings, given: dict[str, str] | None = None) -> int:
    """given: the settings the user gave, for SCENARIO (no fault unless given) and its TARGET, AT, HEAL."""
    from tflab.reports import migrate  # PyYAML is needed only here

    return migrate.migrate(settings, given)
