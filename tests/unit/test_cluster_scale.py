"""Issue 51: no cap where nothing starts. `make config` and `make k8s` take any size the cluster's
own API takes (int32 replica counts) and refuse, in one line, the sizes a real limit breaks, each
named with its source: Linux's 128 KiB for one environment string (TF_CONFIG), Kubernetes' 63
characters for a Service's name."""

import json
import subprocess

import pytest
import yaml
from labtest.cli import lab_env, run_lab
from tflab.core import cluster, limits
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.k8s import sizes

pytestmark = pytest.mark.unit


def workers(count: int, **more) -> Settings:
    return Settings(strategy="multiworker", workers=count, global_batch=count, examples=64 * count, **more)


def test_the_limit_is_the_one_the_kernel_applies():
    """What limits.py says a TF_CONFIG may be is what execve takes, to the byte."""
    fits = "x" * limits.env_value_max("TF_CONFIG")
    assert subprocess.run(["/bin/true"], env={"TF_CONFIG": fits}).returncode == 0
    with pytest.raises(OSError) as refused:
        subprocess.run(["/bin/true"], env={"TF_CONFIG": fits + "x"})
    assert refused.value.strerror == "Argument list too long"


def test_the_largest_cluster_said_to_fit_is_built_and_one_more_is_refused():
    with pytest.raises(SettingsError) as refused:
        cluster.build(workers(8192))
    message = str(refused.value)
    largest = int(message.split("at most ")[1].split(" workers fit")[0].replace(",", ""))
    assert message.startswith("WORKERS=8192 is not allowed: worker-8191's TF_CONFIG would be ")
    assert "MAX_ARG_STRLEN" in message and "(worker-0:2222 ...)" in message
    the_cluster = cluster.build(workers(largest))  # the size said to fit does
    size = len(the_cluster.tf_config_env(f"worker-{largest - 1}")["TF_CONFIG"])
    assert size <= limits.env_value_max("TF_CONFIG") == 131_061
    assert cluster.longest_tf_config(the_cluster.jobs, cluster.compose_address) == (size, True, f"worker-{largest - 1}")
    with pytest.raises(SettingsError):
        cluster.build(workers(largest + 1))


def test_a_billion_workers_are_refused_without_building_them():
    settings = Settings(strategy="multiworker", workers=limits.INT32_MAX)  # the setting's largest
    with pytest.raises(SettingsError) as refused:
        cluster.check_tf_config(settings, cluster.compose_address)
    assert "TF_CONFIG would be at least " in str(refused.value)  # a lower bound, said as one


def test_the_workers_setting_takes_the_apis_int32():
    given = {"STRATEGY": "parameter_server", "WORKERS": "2147483647"}  # a PS step is one worker's batch
    assert Settings.from_env({}, given).workers == limits.INT32_MAX
    with pytest.raises(SettingsError, match="WORKERS=2147483648 is not allowed: expected an integer from 1 to "
                                            "2147483647"):
        Settings.from_env({}, {"WORKERS": "2147483648"})


def test_make_k8s_checks_the_operators_tf_config_and_the_service_names():
    sizes.check(workers(3569), trainjob=True)  # the operator adds "environment": "cloud" to longer addresses
    with pytest.raises(SettingsError, match="at most 3,569 workers fit at these addresses "
                                            r"\(tflab-worker-0.default.svc:2222 \.\.\.\)"):
        sizes.check(workers(3570), trainjob=True)
    named = "a" * 53  # the longest K8S_NAME: room for -worker-31 and no more
    sizes.check(workers(100, k8s_name=named), trainjob=True)  # named-worker-99: 63 characters
    with pytest.raises(LabError) as refused:
        sizes.check(workers(101, k8s_name=named), trainjob=True)
    assert str(refused.value) == (f"WORKERS=101 is not allowed with K8S_NAME={named}: the Service {named}-worker-100 "
                                  "is 64 characters, over the 63 of a DNS-1035 label (Kubernetes' rule for a Service's "
                                  "name); expected a shorter K8S_NAME, or at most 100 workers")


def test_make_k8s_writes_64_workers(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("k8s", f"RUNS_DIR={runs}", "RUN=big", "WORKERS=64", "GLOBAL_BATCH=64",
                     "K8S_IMAGE=registry.example/tflab:1", env=lab_env())
    assert result.returncode == 0, result.output
    (tfjob,) = [document for document in yaml.safe_load_all((runs / "big" / "tfjob.yaml").read_text())
                if document["kind"] == "TFJob"]
    assert tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 64
    jobs = [document for document in yaml.safe_load_all((runs / "big" / "jobs.yaml").read_text())
            if document["kind"] == "Job"]
    assert len(jobs) == 64
    env = {entry["name"]: entry["value"] for entry in jobs[-1]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 63}


def test_make_config_says_the_longest_tf_config_and_shows_a_big_cluster_short():
    result = run_lab("config", "WORKERS=2000", "GLOBAL_BATCH=2000", "EXAMPLES=128000", env=lab_env())
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    shown = [line.split(":")[0] for line in lines if ": TF_CONFIG=" in line]
    assert shown == ["worker-0", "worker-1999"]
    assert "... 1,998 tasks more, each with the spec above and its own task" in lines
    size = len(cluster.build(workers(2000)).tf_config_env("worker-1999")["TF_CONFIG"])
    assert lines[-1] == (f"tflab: the longest TF_CONFIG is worker-1999's, {size:,} bytes, of the 131,061 Linux takes "
                         "for one environment variable")


def test_a_cluster_too_big_for_its_parameter_servers_names_ps():
    """PS=100000 once read "WORKERS=2 is not allowed ... at most N workers fit": the setting named is
    the one whose job makes TF_CONFIG too long."""
    settings = Settings(strategy="parameter_server", workers=2, ps=100_000)
    with pytest.raises(SettingsError) as refused:
        cluster.build(settings)
    message = str(refused.value)
    assert message.startswith("PS=100000 is not allowed: ps-99999's TF_CONFIG would be at least "), message
    largest = int(message.split("at most ")[1].split(" parameter servers fit")[0].replace(",", ""))
    assert "beside chief: 1, worker: 2 at these addresses (ps-0:2222 ...)" in message
    cluster.build(Settings(strategy="parameter_server", workers=2, ps=largest))
    with pytest.raises(SettingsError):
        cluster.build(Settings(strategy="parameter_server", workers=2, ps=largest + 1))
