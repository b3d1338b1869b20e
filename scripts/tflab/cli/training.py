"""The commands that train, or lay out what a training would be: up and stack-up, compare, matrix,
bench, chaos, soak and migrate; the simulated swarm's (the cli's one call into tools/); config and k8s,
which print or write the cluster a run would get and start nothing."""

from __future__ import annotations

import json

from tflab import backends, console
from tflab.core import cluster, limits
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


# make config prints every task's TF_CONFIG up to this many tasks; past it, the first and the last
# (each is the whole spec again: 4,096 workers' would be 300 MB of text).
CONFIG_TASKS_SHOWN = 64


def command_config(settings: Settings) -> int:
    """Prints the resolved settings, the cluster spec and each task's TF_CONFIG, as JSON, and the
    longest TF_CONFIG's size against Linux's limit (cluster.build refuses a cluster past it)."""
    the_cluster, note = backends.config_cluster(settings)
    print(json.dumps({"settings": settings.to_dict(), "addresses": note, "cluster": the_cluster.spec}, indent=2))
    tasks = the_cluster.tasks
    shown = tasks if len(tasks) <= CONFIG_TASKS_SHOWN else tasks[:1] + tasks[-1:]
    for task in shown:
        tf_config = json.dumps(the_cluster.tf_config(task)) if the_cluster.spec else "(none: one process)"
        if task == tasks[-1] and len(shown) < len(tasks):
            print(f"... {len(tasks) - len(shown):,} tasks more, each with the spec above and its own task")
        print(f"{task}: TF_CONFIG={tf_config}")
    if the_cluster.spec:
        size, _, task = cluster.longest_tf_config(the_cluster.jobs, lambda job, index: the_cluster.spec[job][index])
        console.say(f"the longest TF_CONFIG is {task}'s, {size:,} bytes, of the {limits.env_value_max('TF_CONFIG'):,} "
                    "Linux takes for one environment variable")
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
