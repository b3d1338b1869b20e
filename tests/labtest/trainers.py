"""Starting `python -m tflab.train` processes directly, outside the lab, for tests that need to
do what the lab never would (a worker without its peers, Keras 3 under MultiWorkerMirroredStrategy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tflab.backends import local
from tflab.core import cluster
from tflab.core.settings import Settings

from labtest.cli import REPO


def write_config(run_dir: Path, settings: Settings, spec: dict) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.json"
    path.write_text(json.dumps({"settings": settings.to_dict(), "cluster": spec}))
    return path


def local_cluster(settings: Settings) -> dict:
    return cluster.cluster_spec(settings, cluster.local_addresses(local.free_ports(settings.workers)))


def start_trainer(run_dir: Path, spec: dict, task: str, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(REPO / "scripts"), **cluster.tf_config_env(spec, task), **env}
    return subprocess.Popen([sys.executable, "-m", "tflab.train", "--config", str(run_dir / "config.json"),
                             "--task", task], env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
