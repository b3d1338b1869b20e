import json
import os

import pytest
from tflab.core import cluster
from tflab.core.settings import Settings


def multiworker(workers: int) -> Settings:
    return Settings(strategy="multiworker", workers=workers, global_batch=64 * workers)


@pytest.mark.tensorflow
@pytest.mark.parametrize("workers", [*range(1, 33), 64])
def test_tf_config_is_what_tensorflows_own_resolver_understands(workers, monkeypatch):
    import tensorflow as tf

    TFConfigClusterResolver = tf.distribute.cluster_resolver.TFConfigClusterResolver

    settings = multiworker(workers)
    spec = cluster.cluster_spec(settings)
    assert spec == {"worker": [f"worker-{i}:2222" for i in range(workers)]}
    assert cluster.build(settings).tasks == [f"worker-{i}" for i in range(workers)]
    for index, task in enumerate(cluster.build(settings).tasks):
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
        assert cluster.build(settings).tasks == [strategy]
        assert cluster.tf_config_env({}, strategy) == {"TFLAB_TASK": strategy}
        assert cluster.build(settings).chief == strategy


def test_worker_0_is_the_chief():
    assert cluster.build(multiworker(3)).chief == "worker-0"


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
    # Written by hand from TensorFlow's documented format (the multi-worker tutorial's TF_CONFIG:
    # "cluster", job -> "host:port" list; "task", its "type" and "index"), not from cluster.py.
    assert env["TF_CONFIG"] == ('{"cluster":{"worker":["worker-0:2222","worker-1:2222"]},'
                                '"task":{"type":"worker","index":1}}')


@pytest.mark.parametrize("task", ["worker-2", "ps-0", "worker", "worker-x", "-1"])
def test_tasks_outside_the_cluster_are_refused(task):
    with pytest.raises(ValueError):
        cluster.tf_config_for(cluster.cluster_spec(multiworker(2)), task)


@pytest.mark.tensorflow
def test_chief_tf_configs_follow_the_tfjob_convention_and_tensorflows_counting():
    """CHIEF=1 WORKERS=2: chief-0 is id 0 of 3 workers for MultiWorkerMirroredStrategy, the
    workers 1 and 2, exactly as worker-0..2 of WORKERS=3 (so both shard the data alike)."""
    from tensorflow.python.distribute import multi_worker_util

    settings = Settings(strategy="multiworker", chief=1, workers=2, global_batch=96)
    spec = cluster.cluster_spec(settings)
    assert spec == {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"]}
    assert cluster.build(settings).tasks == ["chief-0", "worker-0", "worker-1"]
    assert cluster.build(settings).chief == "chief-0"
    assert settings.replicas_in_sync == 3
    assert multi_worker_util.coordination_leader(spec) == "/job:chief/replica:0/task:0"
    ids = []
    for task in cluster.build(settings).tasks:
        config = cluster.tf_config_for(spec, task)
        job, index = config["task"]["type"], config["task"]["index"]
        assert multi_worker_util.worker_count(config["cluster"], job) == 3
        ids.append(multi_worker_util.id_in_cluster(config["cluster"], job, index))
    assert ids == [0, 1, 2]
    assert [multi_worker_util.is_chief(spec, *cluster.parse_task(t)) for t in cluster.build(settings).tasks] == \
        [True, False, False]


@pytest.mark.tensorflow
@pytest.mark.parametrize("strategy, chief", [("multiworker", 0), ("multiworker", 1), ("parameter_server", 0)])
def test_the_evaluator_is_outside_the_training_cluster(strategy, chief, monkeypatch):
    """As the training operator's genClusterSpec has it: evaluator-0's TF_CONFIG names the training
    cluster, which has no evaluator job, and its task is evaluator 0; TensorFlow's resolver reads it."""
    import tensorflow as tf

    settings = Settings(strategy=strategy, chief=chief, evaluator=1, workers=2)
    spec = cluster.cluster_spec(settings)
    assert "evaluator" not in spec
    assert cluster.build(settings).tasks[-1] == "evaluator-0"
    assert cluster.build(settings).evaluators == ["evaluator-0"]
    assert "evaluator-0" not in cluster.build(settings).trainers + cluster.build(settings).servers
    config = cluster.tf_config_for(spec, "evaluator-0")
    assert config == {"cluster": spec, "task": {"type": "evaluator", "index": 0}}
    monkeypatch.setitem(os.environ, "TF_CONFIG", json.dumps(config))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("evaluator", 0)
    with pytest.raises(ValueError):
        cluster.tf_config_for(spec, "evaluator-1")


@pytest.mark.parametrize("changes, named", [
    ({"strategy": "parameter_server", "chief": 1}, "CHIEF=1"),
    ({"strategy": "single", "evaluator": 1}, "EVALUATOR=1"),
    ({"strategy": "mirrored", "evaluator": 1}, "EVALUATOR=1"),
    ({"chief": 1}, "WORKERS+CHIEF"),  # 3 replicas and GLOBAL_BATCH=64
])
def test_chief_and_evaluator_are_refused_where_they_do_not_fit(changes, named):
    from tflab.core.settings import SettingsError

    with pytest.raises(SettingsError, match=named.replace("+", r"\+")):
        Settings().replace(**changes)


def test_no_evaluator_and_no_chief_by_default():
    settings = multiworker(2)
    assert cluster.build(settings).evaluators == []
    assert cluster.build(settings).tasks == ["worker-0", "worker-1"]


def test_the_trainer_takes_the_recorded_cluster_as_written():
    """config.json's spec is taken whole, addresses and order, whatever wrote it (a TFJob's operator
    sorts the jobs); what is no cluster of the settings beside it is refused."""
    settings = Settings(strategy="parameter_server", workers=2, ps=1)
    written = {"ps": ["10.0.0.9:3000"], "chief": ["c:1"], "worker": ["w0:2", "w1:3"]}
    read = cluster.recorded(settings, written)
    assert read.spec == written and list(read.spec) == ["ps", "chief", "worker"]
    assert read.tasks == ["chief-0", "worker-0", "worker-1", "ps-0"]
    assert (read.chief, read.servers) == ("chief-0", ["worker-0", "worker-1", "ps-0"])
    with pytest.raises(ValueError, match=r"^the spec \{'worker': \['w0:2'\]\} is not a cluster of "
                                         r"\{'chief': 1, 'worker': 2, 'ps': 1\}$"):
        cluster.recorded(settings, {"worker": ["w0:2"]})


@pytest.mark.parametrize("strategy", ["multiworker", "parameter_server", "single"])
def test_each_command_builds_its_cluster_once(strategy, tmp_path, monkeypatch, capsys):
    """`make up` builds the cluster once and hands it along (the backend readdresses it), and so do
    `make k8s` and `make config`: a second build somewhere would be a second truth to drift."""
    from tflab import backends
    from tflab.cli import training
    from tflab.core.errors import LabError
    from tflab.k8s import writer as k8s
    from tflab.supervisor import runner

    real_build, built = cluster.build, []
    monkeypatch.setattr(cluster, "build", lambda *args, **kwargs: built.append(1) or real_build(*args, **kwargs))

    def handed(settings, run_dir, the_cluster, proxied):
        assert the_cluster.tasks == real_build(settings).tasks
        raise LabError("the backend got its cluster: nothing more is needed here")

    monkeypatch.setattr(backends, "make", handed)
    settings = Settings(strategy=strategy, runs_dir=str(tmp_path), k8s_image="registry.example/t:1")
    with pytest.raises(LabError, match="the backend got its cluster"):
        runner.up(settings.replace(run="up"))
    assert len(built) == 1
    assert k8s.write(settings.replace(run="k8s")) == 0
    assert len(built) == 2
    assert training.command_config(settings) == 0
    assert len(built) == 3
    capsys.readouterr()


def test_the_settings_count_of_replicas_in_sync_is_the_clusters_where_both_count_tasks():
    """Settings.replicas_in_sync (the GLOBAL_BATCH rule's, before any cluster exists) counts
    multiworker's replicas as the cluster's replica tasks; mirrored's replicas are devices of one
    task, and parameter_server's steps are each one worker's, so there the two counts differ."""
    for workers in range(1, 65):
        for chief in (0, 1):
            settings = Settings(strategy="multiworker", workers=workers, chief=chief, global_batch=workers + chief)
            assert settings.replicas_in_sync == len(cluster.build(settings).replicas) == workers + chief
    assert Settings(strategy="mirrored", replicas=4).replicas_in_sync == 4
    assert cluster.build(Settings(strategy="mirrored", replicas=4)).replicas == ["mirrored"]
    assert Settings(strategy="parameter_server", workers=3, global_batch=63).replicas_in_sync == 1
    assert len(cluster.build(Settings(strategy="parameter_server", workers=3, global_batch=63)).replicas) == 3
