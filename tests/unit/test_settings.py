import pytest
from tflab.settings import SPECS, Settings, SettingsError, settings_table


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


def test_empty_values_mean_the_default():
    assert Settings.from_env({"WORKERS": "", "STRATEGY": " "}) == Settings()


@pytest.mark.parametrize("name, value, expected", [
    ("STRATEGY", "bogus",
     "STRATEGY=bogus is not allowed: expected one of single, mirrored, multiworker, parameter_server"),
    ("STRATEGY", "Mirrored", "STRATEGY=Mirrored is not allowed"),
    ("WORKERS", "0", "WORKERS=0 is not allowed: expected an integer from 1 to 16"),
    ("WORKERS", "abc", "WORKERS=abc is not allowed: expected an integer from 1 to 16"),
    ("WORKERS", "100", "WORKERS=100 is not allowed: expected an integer from 1 to 16"),
    ("WORKERS", "2.5", "WORKERS=2.5 is not allowed"),
    ("REPLICAS", "-1", "REPLICAS=-1 is not allowed: expected an integer from 1 to 16"),
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
    with pytest.raises(SettingsError, match="unknown setting WORKER; allowed settings: STRATEGY, WORKERS"):
        Settings.from_env({}, {"WORKER": "3"})


def test_saved_settings_read_back_equal_and_are_checked_again():
    settings = parse(STRATEGY="mirrored", REPLICAS=4, EPOCHS=3)
    assert Settings.from_dict(settings.to_dict()) == settings
    with pytest.raises(SettingsError):
        Settings.from_dict({**settings.to_dict(), "global_batch": 6})


def test_every_setting_is_in_the_table_once():
    names = [row[0] for row in settings_table()]
    assert names == list(SPECS)
    assert {spec.field for spec in SPECS.values()} == set(Settings().to_dict())
