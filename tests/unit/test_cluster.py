import json
import os

import pytest
from tflab import cluster
from tflab.settings import MAX_TASKS, Settings


def multiworker(workers: int) -> Settings:
    return Settings(strategy="multiworker", workers=workers, global_batch=64 * workers)


@pytest.mark.parametrize("workers", range(1, MAX_TASKS + 1))
def test_tf_config_is_what_tensorflows_own_resolver_understands(workers, monkeypatch):
    import tensorflow as tf

    TFConfigClusterResolver = tf.distribute.cluster_resolver.TFConfigClusterResolver

    settings = multiworker(workers)
    spec = cluster.cluster_spec(settings)
    assert spec == {"worker": [f"worker-{i}:2222" for i in range(workers)]}
    assert cluster.task_names(settings) == [f"worker-{i}" for i in range(workers)]
    for index, task in enumerate(cluster.task_names(settings)):
        env = cluster.tf_config_env(spec, task)
        assert env["TFLAB_TASK"] == task
        monkeypatch.setitem(os.environ, "TF_CONFIG", env["TF_CONFIG"])
        resolver = TFConfigClusterResolver()
        assert resolver.cluster_spec().as_dict() == spec
        assert (resolver.task_type, resolver.task_id) == ("worker", index)
        assert resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id) == f"worker-{index}:2222"


def test_single_process_strategies_have_no_cluster_and_no_tf_config():
    for strategy in ("single", "mirrored"):
        settings = Settings(strategy=strategy)
        assert cluster.cluster_spec(settings) == {}
        assert cluster.task_names(settings) == [strategy]
        assert cluster.tf_config_env({}, strategy) == {"TFLAB_TASK": strategy}
        assert cluster.chief_task(settings) == strategy


def test_worker_0_is_the_chief():
    assert cluster.chief_task(multiworker(3)) == "worker-0"


def test_local_addresses_use_the_same_generator_with_loopback_ports():
    settings = multiworker(3)
    spec = cluster.cluster_spec(settings, cluster.local_addresses([5001, 5002, 5003]))
    assert spec == {"worker": ["localhost:5001", "localhost:5002", "localhost:5003"]}
    compose_config = cluster.tf_config_for(cluster.cluster_spec(settings), "worker-2")
    local_config = cluster.tf_config_for(spec, "worker-2")
    assert local_config["task"] == compose_config["task"] == {"type": "worker", "index": 2}
    assert local_config.keys() == compose_config.keys()


def test_tf_config_is_compact_json_of_the_dict():
    spec = cluster.cluster_spec(multiworker(2))
    env = cluster.tf_config_env(spec, "worker-1")
    assert json.loads(env["TF_CONFIG"]) == cluster.tf_config_for(spec, "worker-1")
    assert " " not in env["TF_CONFIG"]


@pytest.mark.parametrize("task", ["worker-2", "ps-0", "worker", "worker-x", "-1"])
def test_tasks_outside_the_cluster_are_refused(task):
    with pytest.raises(ValueError):
        cluster.tf_config_for(cluster.cluster_spec(multiworker(2)), task)
