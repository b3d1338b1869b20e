import pytest
from tflab.core.settings import SPECS, Settings, SettingsError, settings_table


def parse(**values):
    return Settings.from_env({}, {k: str(v) for k, v in values.items()})


def test_defaults_are_a_valid_run():
    settings = parse()
    assert settings == Settings()
    assert settings.strategy == "multiworker" and settings.workers == 2
    assert settings.steps_per_epoch == 4096 // 64


def test_environment_is_read_and_arguments_win():
    settings = Settings.from_env({"WORKERS": "4", "EPOCHS": "3"}, {"WORKERS": "8"})
    assert (settings.workers, settings.epochs) == (8, 3)


def test_empty_environment_variables_mean_the_default():
    assert Settings.from_env({"WORKERS": "", "STRATEGY": ""}) == Settings()


def test_an_empty_value_given_by_name_is_refused_unless_empty_is_allowed():
    """`make compare COMPARE=' '` reaches the lab as COMPARE="" (make strips the blank): the
    Makefile names its command-line variables, so an empty one is refused like a blank one."""
    with pytest.raises(SettingsError, match="^COMPARE='' is not allowed: an empty or blank value is not the default"):
        Settings.from_env({"COMPARE": "", "TFLAB_MAKE_VARIABLES": "COMPARE"})
    with pytest.raises(SettingsError, match="^WORKERS='' is not allowed"):
        Settings.from_env({}, {"WORKERS": ""})
    assert Settings.from_env({"GPUS": "", "TFLAB_MAKE_VARIABLES": "GPUS"}, {"RUN": ""}) == Settings()


@pytest.mark.parametrize("name", ["TRAINJOB", "TFJOB", "SCRIPT", "DATA", "CLAIMS", "KERAS", "TF", "RUNTIME"])
def test_an_empty_file_or_version_given_by_name_is_refused(name):
    """Empty is their default, but `make up TRAINJOB=$JOB` with $JOB unset meant a file: given by
    name (an argument, make's command line), empty or blank, it is refused naming what leaving it
    out means; an empty environment variable is left to the command (cli/protocol.py)."""
    for env, overrides in (({}, {name: ""}), ({}, {name: " "}), ({name: "", "TFLAB_MAKE_VARIABLES": name}, {})):
        with pytest.raises(SettingsError, match=rf"^{name}='\s?' is not allowed: an empty {name} is taken for a "
                                                rf"mistake .* or {name} left out \(unset\) for "):
            Settings.from_env(env, overrides)
    assert Settings.from_env({name: ""}) == Settings()


def test_a_blank_value_is_the_default_only_where_empty_is_allowed():
    """`make compare COMPARE=' '` once ran the whole default compare."""
    assert Settings.from_env({"GPUS": " ", "LINK": "\t", "SCRIPT": "  "}) == Settings()
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {"COMPARE": " "})
    assert str(refused.value) == (
        "COMPARE=' ' is not allowed: an empty or blank value is not the default; expected entries single, "
        "mirrored-N (N: 1..32), multiworker-N, parameter-server-N (N: 1+) (leave COMPARE out for the default, "
        "single mirrored-2 mirrored-4 multiworker-1 multiworker-2 multiworker-4 parameter-server-2)")


@pytest.mark.parametrize("name, value, expected", [
    ("STRATEGY", "bogus",
     "STRATEGY=bogus is not allowed: expected one of single, mirrored, multiworker, parameter_server"),
    ("STRATEGY", "Mirrored", "STRATEGY=Mirrored is not allowed"),
    ("WORKERS", "0", "WORKERS=0 is not allowed: expected an integer from 1 to 2147483647"),
    ("WORKERS", "abc", "WORKERS=abc is not allowed: expected an integer from 1 to 2147483647"),
    ("WORKERS", "2147483648", "WORKERS=2147483648 is not allowed: expected an integer from 1 to 2147483647"),
    ("WORKERS", "2.5", "WORKERS=2.5 is not allowed"),
    ("REPLICAS", "-1", "REPLICAS=-1 is not allowed: expected an integer from 1 to 32"),
    ("EPOCHS", "-1", "EPOCHS=-1 is not allowed: expected an integer from 1 to 10000"),
    ("EPOCHS", "0", "EPOCHS=0 is not allowed"),
    ("GLOBAL_BATCH", "0", "GLOBAL_BATCH=0 is not allowed"),
    ("EXAMPLES", "ten", "EXAMPLES=ten is not allowed"),
    ("SEED", "-3", "SEED=-3 is not allowed: expected an integer from 0 to 2147483647"),
    ("RUN", "My Run", "RUN=My Run is not allowed: expected lowercase letters, digits and '-'"),
    ("RUN", "../escape", "RUN=../escape is not allowed"),
    ("RUN", "-leading-dash", "RUN=-leading-dash is not allowed"),
    ("BACKEND", "k8s", "BACKEND=k8s is not allowed: expected one of compose, local, swarm"),
    ("PEER_TIMEOUT", "0", "PEER_TIMEOUT=0 is not allowed: expected seconds from 1 to 3600"),
    ("PEER_TIMEOUT", "nan", "PEER_TIMEOUT=nan is not allowed"),
    ("TIMEOUT", "forever", "TIMEOUT=forever is not allowed: expected seconds from 10 to 86400"),
    ("COMPOSE", "v3", "COMPOSE=v3 is not allowed: expected one of auto, v2, v1"),
    ("RUNS_DIR", "my runs", "RUNS_DIR='my runs' is not allowed"),
    ("GPUS", "gpu0", "GPUS=gpu0 is not allowed: expected all, or distinct GPU indexes such as 0,1"),
    ("GPUS", "0,0", "GPUS=0,0 is not allowed: expected all, or distinct GPU indexes"),
    ("GPUS", "0,00", "GPUS=0,00 is not allowed"),
    ("GPUS", "0, 1", "GPUS=0, 1 is not allowed"),
    ("GPUS", "0,", "GPUS=0, is not allowed"),
    ("GPUS", "-1", "GPUS=-1 is not allowed"),
    ("GPUS", "ALL", "GPUS=ALL is not allowed"),
    # Other scripts' digits: Python's int() and float() take some, Docker and Kubernetes none.
    ("BACKUP", "\u00b2", "BACKUP=\u00b2 is not allowed: expected epoch, off, or a number of steps"),
    ("WORKERS", "\u0663", "WORKERS=\u0663 is not allowed: expected an integer from 1 to 2147483647"),
    ("MEMORY", "\u0663g", "MEMORY=\u0663g is not allowed: expected 0 (no limit) or a size of at least 6m"),
    ("TIMEOUT", "\u0661\u0662\u0660", "TIMEOUT=\u0661\u0662\u0660 is not allowed: expected seconds from 10 to 86400"),
    ("TIMEOUT", "1_000", "TIMEOUT=1_000 is not allowed"),
    ("TIMEOUT", "inf", "TIMEOUT=inf is not allowed"),
    ("AT", "epoch:\u0663", "AT=epoch:\u0663 is not allowed"),
    ("LINK", "\u0661ms,1mbit", "LINK=\u0661ms,1mbit is not allowed"),
    ("EPOCHS", "9" * 5000, "EPOCHS=999"),  # beyond int()'s 4300 digits
    ("COMPARE", "multiworker-0", "COMPARE='multiworker-0' is not allowed (entry multiworker-0): expected a count "
                                 "from 1 to 2147483647, such as multiworker-2"),
    ("COMPARE", "single mirrored-33", "COMPARE='single mirrored-33' is not allowed (entry mirrored-33)"),
    ("BASE_IMAGE", "-v", "BASE_IMAGE='-v' is not allowed: expected an image reference such as python:3.11-slim"),
    ("BASE_IMAGE", "--help", "BASE_IMAGE='--help' is not allowed: expected an image reference"),
    ("K8S_IMAGE", "-rm", "K8S_IMAGE='-rm' is not allowed: expected an image reference"),
    ("K8S_IMAGE", "Tflab:latest", "K8S_IMAGE='Tflab:latest' is not allowed"),
    ("K8S_IMAGE", "tflab:", "K8S_IMAGE='tflab:' is not allowed"),
    ("RUN", "latest", "RUN=latest is not allowed: latest is the lab's link to the newest run"),
    ("RUNS_DIR", "a:b", "RUNS_DIR=a:b is not allowed: expected a path without ':'"),
    ("SCRIPT", "/tmp/a:b/train.py", "SCRIPT=/tmp/a:b/train.py is not allowed: expected the path of an existing "
                                    "Python file (*.py), without ':'"),
    ("CPUS", "0.0004", "CPUS=0.0004 is not allowed: expected CPUs from 0.01 to 64, or 0 (no limit)"),
    ("MEMORY", "5m", "MEMORY=5m is not allowed: expected 0 (no limit) or a size of at least 6m (Docker's minimum)"),
    ("MEMORY", "0m", "MEMORY=0m is not allowed"),
    ("ARGS", "a\0b", "ARGS='a\\x00b' is not allowed"),
    ("TARGET", "worker-0\x1b[2J", "TARGET='worker-0\\x1b[2J' is not allowed: expected printable characters only"),
])
def test_bad_values_are_refused_naming_the_value_and_what_is_allowed(name, value, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {name: value})
    message = str(refused.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_global_batch_must_split_evenly_over_the_replicas():
    with pytest.raises(SettingsError, match=r"GLOBAL_BATCH=64 is not divisible by the 3 replicas of "
                                            r"STRATEGY=multiworker; allowed: a multiple of 3, such as 63 or 66"):
        parse(WORKERS=3)
    with pytest.raises(SettingsError, match="GLOBAL_BATCH=7 is not divisible by the 2 replicas of STRATEGY=mirrored"):
        parse(STRATEGY="mirrored", GLOBAL_BATCH=7)
    # The divisor is the strategy's replica count: WORKERS does not matter to mirrored.
    assert parse(STRATEGY="mirrored", REPLICAS=4, WORKERS=3, GLOBAL_BATCH=64).replicas_in_sync == 4
    assert parse(STRATEGY="single", WORKERS=3, GLOBAL_BATCH=7).replicas_in_sync == 1


@pytest.mark.parametrize("given, kept, indexes", [
    ("all", "all", ()), ("0", "0", ("0",)), ("1,0", "1,0", ("1", "0")), ("01,2", "1,2", ("1", "2")),
])
def test_gpus_are_all_or_distinct_indexes(given, kept, indexes):
    settings = parse(GPUS=given)
    assert (settings.gpus, settings.gpu_indexes) == (kept, indexes)
    assert parse().gpus == "" and parse().gpu_indexes == ()


def test_mirrored_splits_the_batch_over_the_gpus_it_is_given():
    assert parse(STRATEGY="mirrored", GPUS="0,1,2,3", REPLICAS=3, GLOBAL_BATCH=64).replicas_in_sync == 4
    with pytest.raises(SettingsError, match="GLOBAL_BATCH=64 is not divisible by the 3 replicas of STRATEGY=mirrored"):
        parse(STRATEGY="mirrored", GPUS="0,1,2")
    # GPUS=all: how many is the trainer's to find; the host checks what it knows, REPLICAS.
    assert parse(STRATEGY="mirrored", GPUS="all").replicas_in_sync == 2
    assert parse(STRATEGY="multiworker", WORKERS=4, GPUS="0").replicas_in_sync == 4


def test_nccl_needs_gpus_and_gpus_need_containers():
    with pytest.raises(SettingsError) as refused:
        parse(COLLECTIVE="nccl")
    assert str(refused.value) == ("COLLECTIVE=nccl is not allowed without GPUS: expected GPUS=all or GPU indexes "
                                  "such as GPUS=0,1 (NCCL runs on GPUs only), or COLLECTIVE=auto or ring")
    assert parse(COLLECTIVE="nccl", GPUS="all").collective == "nccl"
    with pytest.raises(SettingsError) as refused:
        parse(GPUS="0,1", BACKEND="local")
    assert str(refused.value) == ("GPUS=0,1 is not allowed with BACKEND=local: expected BACKEND=compose "
                                  "(the lab hands GPUs to containers), or GPUS empty")


def test_examples_must_fill_one_global_batch():
    with pytest.raises(SettingsError, match="EXAMPLES=32 is smaller than GLOBAL_BATCH=64"):
        parse(EXAMPLES=32)


def test_unknown_settings_are_refused():
    with pytest.raises(SettingsError, match=r"^unknown setting WORKER; did you mean WORKERS\?$"):
        Settings.from_env({}, {"WORKER": "3"})
    with pytest.raises(SettingsError, match="unknown setting XYZZY; allowed settings: STRATEGY, WORKERS"):
        Settings.from_env({}, {"XYZZY": "3"})


def test_saved_settings_read_back_equal_and_are_checked_again():
    settings = parse(STRATEGY="mirrored", REPLICAS=4, EPOCHS=3)
    assert Settings.from_dict(settings.to_dict()) == settings
    with pytest.raises(SettingsError):
        Settings.from_dict({**settings.to_dict(), "global_batch": 6})


def test_every_setting_is_in_the_table_once():
    names = [row[0] for row in settings_table()]
    assert names == list(SPECS)
    assert {spec.field for spec in SPECS.values()} == set(Settings().to_dict())


@pytest.mark.parametrize("image", ["python:3.11-slim", "tflab-trainer:latest", "localhost:5000/team/tflab:1.0",
                                   "registry.example.com/a/b_c__d-e", "python@sha256:" + "0" * 64, "debian"])
def test_image_references_docker_takes_are_taken(image):
    assert parse(BASE_IMAGE=image, K8S_IMAGE=image).k8s_image == image


def test_runs_dir_naming_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingsError, match=f"^RUNS_DIR={tmp_path}/file is not allowed: {tmp_path}/file is a file; "
                                            "expected a folder"):
        parse(RUNS_DIR=tmp_path / "file")
    assert parse(RUNS_DIR=tmp_path / "new").runs_dir == str(tmp_path / "new")


def test_a_script_whose_real_path_has_a_colon_is_refused(tmp_path):
    (tmp_path / "a:b").mkdir()
    (tmp_path / "a:b" / "train.py").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "a:b")
    with pytest.raises(SettingsError, match=f"^SCRIPT={tmp_path}/link/train.py is not allowed: its path "
                                            f"{tmp_path}/a:b/train.py has a ':'"):
        parse(SCRIPT=tmp_path / "link" / "train.py")


@pytest.mark.parametrize("changes, expected", [
    ({"workers": 0}, "WORKERS=0 is not allowed: expected an integer from 1 to 2147483647"),
    ({"epochs": -5}, "EPOCHS=-5 is not allowed: expected an integer from 1 to 10000"),
    ({"strategy": "bogus"}, "STRATEGY=bogus is not allowed: expected one of single, mirrored"),
    ({"workers": True}, "WORKERS=true is not allowed: expected 1 or more"),
    ({"workers": "2"}, 'WORKERS="2" is not allowed: expected 1 or more'),
    ({"epochs": 2.0}, "EPOCHS=2.0 is not allowed: expected 1..10000"),
    ({"cpus": float("nan")}, "CPUS=nan is not allowed"),
    ({"gpus": "01"}, "GPUS=01 is not allowed: expected empty | all | GPU indexes such as 0,1, written as 1"),
    ({"strategy": " single"}, "STRATEGY=' single' is not allowed"),
    ({"compare": ""}, "COMPARE='' is not allowed (nothing)"),
    ({"run": "latest"}, "RUN=latest is not allowed"),
    ({"bogus": 1}, "unknown setting 'bogus'; allowed settings: strategy, workers"),
])
def test_config_json_is_checked_with_the_same_rules(changes, expected):
    """The trainer reads config.json with from_dict: an unknown strategy must not fall through to
    multiworker, nor workers: 0 divide by zero."""
    with pytest.raises(SettingsError) as refused:
        Settings.from_dict({**Settings().to_dict(), **changes})
    assert str(refused.value).startswith(expected)
    assert "\n" not in str(refused.value)


def test_replace_checks_every_setting_too():
    with pytest.raises(SettingsError, match="^WORKERS=0 is not allowed"):
        Settings().replace(workers=0)
    assert Settings.from_dict({"cpus": 1}).cpus == 1.0  # a JSON integer is a number of CPUs too


@pytest.mark.parametrize("values, given, way_out", [
    ({"KERAS": "keras3"}, "KERAS=keras3", "KERAS=tf-keras"),
    ({"KERAS": "3.15", "STRATEGY": "parameter_server"}, "KERAS=3.15", "KERAS=tf-keras"),
    ({"TF": "next"}, "TF=next (2.22.0rc0) (its tf.keras is Keras 3)", "a TF with tf-keras (TF=2.21 KERAS=tf-keras)"),
])
def test_the_labs_evaluator_under_keras_3_is_refused_in_one_line_with_the_way_out(values, given, way_out):
    """The lab's evaluator is tf-keras's SidecarEvaluator: Keras 3 has none (issue 45)."""
    with pytest.raises(SettingsError) as refused:
        parse(EVALUATOR=1, **values)
    message = str(refused.value)
    assert message.startswith(f"EVALUATOR=1 is not allowed with {given}: Keras 3 has no SidecarEvaluator")
    assert message.endswith(f"expected {way_out}, or EVALUATOR=0") and "\n" not in message


def test_an_evaluator_of_its_own_or_tf_keras_is_not_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import keras\n")
    assert parse(EVALUATOR=1, KERAS="tf-keras").evaluator == 1
    assert parse(EVALUATOR=1, TF="2.21").keras == ""  # tf-keras is 2.21's default
    assert parse(EVALUATOR=1, KERAS="keras3", SCRIPT=str(script)).script  # a script's evaluator is its own
    assert parse(EVALUATOR=0, KERAS="keras3").keras == "keras3"


@pytest.mark.parametrize("given, said", [({"precision": "mixed_float16"}, "PRECISION=mixed_float16"),
                                         ({"precisions": "float32 mixed_bfloat16"},
                                          "PRECISIONS=float32 mixed_bfloat16")])
def test_a_precision_with_a_script_is_refused_naming_both(given, said):
    """The lab's trainer sets the Keras policy (trainer/train.py); a script builds its own model, so
    PRECISION=mixed_float16 with one trained at float32 while the run's end line said "at
    mixed_float16" (issue 56)."""
    with pytest.raises(SettingsError) as refused:
        Settings(script="train.py", **given).validated()
    assert str(refused.value).startswith(f"{said} is not allowed with SCRIPT=train.py: ")
    assert "expected PRECISION=float32 and PRECISIONS empty with SCRIPT" in str(refused.value)
    assert Settings(script="train.py", precision="float32", precisions="float32").validated().script == "train.py"
    assert Settings(**given).validated().script == ""  # the lab's own trainer applies it
