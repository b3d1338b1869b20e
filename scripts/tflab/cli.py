"""The host side's command line; the Makefile's targets call it.

    python3 -m tflab up STRATEGY=multiworker WORKERS=3     # or the same names as environment variables
    python3 -m tflab config WORKERS=3                      # the cluster spec and every TF_CONFIG
    python3 -m tflab k8s WORKERS=3                         # the same cluster as Kubernetes manifests
    python3 -m tflab summary [RUN=<id>] | logs [RUN=<id>] | tensorboard | down | images | wheels | clean | settings

The host side needs nothing but Python 3.9+ and Docker: it never imports TensorFlow.
A user's mistake is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from tflab import cluster, compose, images, k8s, local, report, runner, summary, swarm
from tflab.errors import LabError
from tflab.settings import Settings, settings_table

USAGE_ERROR = 2


def parse_assignments(arguments: list[str]) -> dict[str, str]:
    pairs = {}
    for argument in arguments:
        name, equals, value = argument.partition("=")
        if not equals or not name:
            raise LabError(f"unexpected argument {argument!r}; settings are given as NAME=value")
        pairs[name] = value
    return pairs


def load_settings(arguments: list[str]) -> Settings:
    return Settings.from_env(os.environ, parse_assignments(arguments))


def command_up(settings: Settings) -> int:
    return runner.up(settings)


def command_compare(settings: Settings) -> int:
    return runner.compare(settings)


def command_report(settings: Settings) -> int:
    folder = runner.existing_run_dir(settings)
    found, written = report.write(folder)
    print(report.table(found))
    print("tflab: wrote " + ", ".join(runner.display_path(path) for path in written))
    if not any(path.suffix == ".png" for path in written):
        print("tflab: report.png skipped: matplotlib is not installed for this Python (`make report` uses .venv's)")
    return 0


def command_bench(settings: Settings) -> int:
    from tflab import bench

    return bench.bench(settings)


def command_chaos(settings: Settings) -> int:
    from tflab import chaos

    return chaos.chaos(settings)


def command_soak(settings: Settings) -> int:
    from tflab import chaos

    return chaos.soak(settings)


def command_config(settings: Settings) -> int:
    """Prints the resolved settings, the cluster spec and each task's TF_CONFIG, as JSON."""
    if settings.backend == "local":
        address = cluster.local_addresses(local.free_ports(len(cluster.task_names(settings))))
        note = "local: ports are picked afresh when a run starts"
    elif settings.backend == "swarm":
        address, note = cluster.compose_address, "swarm: service names in the stack's network, port 2222"
    else:
        address, note = cluster.compose_address, "compose: stable hostnames, port 2222"
    spec = cluster.cluster_spec(settings, address)
    print(json.dumps({"settings": settings.to_dict(), "addresses": note, "cluster": spec}, indent=2))
    for task in cluster.task_names(settings):
        tf_config = json.dumps(cluster.tf_config_for(spec, task)) if spec else "(none: one process)"
        print(f"{task}: TF_CONFIG={tf_config}")
    return 0


def command_k8s(settings: Settings) -> int:
    return k8s.write(settings)


def command_summary(settings: Settings) -> int:
    run_dir = runner.existing_run_dir(settings)
    path = run_dir / "summary.json"
    if not path.exists():
        raise LabError(f"run {run_dir.name} has no summary.json: it is still running, or the lab was killed")
    print(summary.table(json.loads(path.read_text())))
    return 0


def command_logs(settings: Settings) -> int:
    run_dir = runner.existing_run_dir(settings)
    output = run_dir / "output.log"
    if not output.exists():
        raise LabError(f"run {run_dir.name} has no output.log yet: it is still running, "
                       f"follow it in its <task>.jsonl files in {run_dir}")
    sys.stdout.write(output.read_text())
    return 0


def command_down(settings: Settings) -> int:
    compose.check_docker()
    projects = compose.lab_projects()
    for project in projects:
        compose.remove_project(project)
        print(f"tflab: removed {project}")
    stacks = swarm.lab_stacks()
    for stack in stacks:
        removed = swarm.remove_stack(stack)
        print(f"tflab: removed stack {stack}" if removed else f"tflab: stack {stack} is still being removed")
    if not projects and not stacks:
        print("tflab: no lab containers to remove")
    return 0


def command_images(settings: Settings) -> int:
    compose.check_docker()
    name = images.ensure_image(settings.base_image, images.trainer_variant(settings))
    size = compose.run_quiet(["docker", "image", "inspect", "--format", "{{.Size}}", name]).stdout.strip()
    print(f"tflab: {name} is up to date ({int(size) / 1e9:.2f} GB)")
    return 0


def command_wheels(settings: Settings) -> int:
    image = images.variant_for(settings.gpus, settings.platform or images.machine_platform())
    images.ensure_wheels(image)
    print(f"tflab: {image.wheels.relative_to(compose.REPO)}/ holds the pinned wheels")
    return 0


def command_clean(settings: Settings) -> int:
    """Removes what the lab can rebuild; never a run's outputs."""
    command_down(settings)
    variants = [images.variant(gpu=False), images.variant(gpu=True), images.variant(platform=images.ARM64)]
    # Scripts' images first: they are layers on the trainer's.
    for name in images.script_images() + images.built_images() + list(images.LOCAL_BASES.values()):
        if images.image_id(name):
            subprocess.run(["docker", "image", "rm", "--force", name], capture_output=True)
            print(f"tflab: removed image {name}")
    images.BUILT.unlink(missing_ok=True)
    for variant in variants:
        for wheel in variant.wheels.glob("*.whl"):
            wheel.unlink()
        variant.stamp.unlink(missing_ok=True)
    print("tflab: removed the wheelhouses")
    runs = runner.runs_dir(settings)
    kept = len([p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()]) if runs.exists() else 0
    print(f"tflab: kept {kept} run folder(s) in {runs}: delete them yourself (rm -rf {runs}) if you mean to")
    return 0


def command_tensorboard(settings: Settings) -> int:
    compose.check_docker()
    cli = compose.find_compose(settings.compose)
    runs = runner.runs_dir(settings)
    runs.mkdir(parents=True, exist_ok=True)
    url = compose.serve_tensorboard(cli, runs, settings.tensorboard_port, images.ensure_image(settings.base_image,
                                                                                 images.trainer_variant(settings)))
    print(f"tflab: TensorBoard shows every run in {runner.display_path(runs)}/ at {url} "
          "(127.0.0.1 only; `make down` stops it)")
    return 0


def command_settings(settings: Settings) -> int:
    rows = [("setting", "default", "allowed", "meaning")] + settings_table()
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(value.ljust(width) for value, width in zip(row[:3], widths)) + "  " + row[3])
    return 0


COMMANDS = {
    "up": (command_up, "run a training on the lab and wait for its end"),
    "compare": (command_compare, "run every COMPARE entry side by side and write their report"),
    "report": (command_report, "rebuild the report of a compare folder or a run (RUN=...)"),
    "bench": (command_bench, "measure the lab's overhead and the multi-worker step, side by side"),
    "chaos": (command_chaos, "a run with one fault injected: SCENARIO, TARGET, AT, HEAL"),
    "soak": (command_soak, "SOAK runs with random faults; prints survived/ended-cleanly/hung counts"),
    "config": (command_config, "print the cluster spec and every task's TF_CONFIG"),
    "k8s": (command_k8s, "write Kubernetes manifests for the settings: a TFJob, and plain Jobs"),
    "summary": (command_summary, "print a finished run's summary table (RUN=..., default the newest)"),
    "logs": (command_logs, "print a finished run's merged, timestamped task output"),
    "down": (command_down, "remove every container, network and swarm stack the lab left behind"),
    "images": (command_images, "build the trainer image if its inputs changed"),
    "wheels": (command_wheels, "download the trainer's pinned wheels"),
    "clean": (command_clean, "remove the lab's containers, images and wheels (never runs/)"),
    "tensorboard": (command_tensorboard, "serve every run's TensorBoard scalars on 127.0.0.1 (TENSORBOARD_PORT)"),
    "settings": (command_settings, "list every setting with its default"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tflab", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=COMMANDS, metavar="command",
                        help="; ".join(f"{name}: {doc}" for name, (_, doc) in COMMANDS.items()))
    parser.add_argument("settings", nargs="*", metavar="NAME=value")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.settings)
        return COMMANDS[args.command][0](settings)
    except LabError as error:
        print(f"tflab: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("tflab: interrupted", file=sys.stderr)
        return 130
