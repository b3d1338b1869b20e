"""What every `Settings` does beyond holding its values: the `Setting` record each field of the
declaration carries, reading settings from the environment (from_env) and from config.json
(from_dict), each setting's own check, and the checks that involve more than one (validated).

Apart from core/settings.py so that the declaration is the one thing that module holds; these rules
find the settings they apply from the dataclass's own fields (specs_of), so they name no setting's
grammar and import nothing of the declaration.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from tflab.core import versions
from tflab.core.backends import capabilities, those_with
from tflab.core.commands import MAKE_VARIABLES_ENV, RUNS, check_make_variables
from tflab.core.explain import KERAS3_NO_EVALUATOR
from tflab.core.grammars import SettingsError, script_env_hint

# The Settings dataclass (core/settings.py) is built on these rules; they name it by this bound
# type, so neither module imports the other back.
AnySettings = TypeVar("AnySettings", bound="SettingsRules")

EVALUATOR_STRATEGIES = ("multiworker", "parameter_server")

# GPUs run on linux/amd64 only: the lab's one GPU image is built from CUDA's wheels, which are.
GPU_IMAGE_AMD64_ONLY = "the GPU image is x86_64 only (CUDA's wheels are linux/amd64)"


@dataclass(frozen=True)
class Setting:
    """One setting, as its field in the Settings dataclass declares it (core/settings.py's `setting`
    puts all but the name and default in the field's metadata): the parsing, `make help`,
    `tflab <command> --help` and which command takes it all come from here."""
    name: str  # as a user gives it; its field in Settings (and config.json) is name.lower()
    default: object  # its type is the field's: str, int or float
    parse: Callable[[str, str], object]  # text -> value, the same on the host and in the trainer
    allowed: str  # what a user may give, for errors and the settings table
    doc: str
    # Checks of the host's files, from_env only: a path setting's parsed text -> the text it keeps.
    on_host: Callable[[str, str], str] | None = None
    # The commands that read it; given by name to any other, it is refused. Most are a run's.
    commands: tuple[str, ...] = RUNS
    # `tflab up TFJOB=`: why the TFJob decides this setting instead (then it is refused with TFJOB),
    # or REPLAYED where the replay reads it; empty where `up` reads it only without a TFJob, or never.
    tfjob: str = ""
    # command -> "make <command>: why", where the setting's very value (from the environment too)
    # cannot be honoured by a command that otherwise runs the settings' training.
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Where empty is the default but never a value a user means to give (a file, a version): what
    # leaving the setting out means. `make up TRAINJOB=$JOB` with $JOB unset would otherwise train
    # the lab's own job, and pass in CI; so an empty value given is refused (empty_refusal).
    left_out: str = ""

    @property
    def field(self) -> str:
        return self.name.lower()

    @property
    def empty_allowed(self) -> bool:
        """Empty is a value of its own (CPUs only, a fresh run id, the lab's own script...) exactly
        where it is the default."""
        return self.default == ""

    @classmethod
    def of(cls, field: dataclasses.Field) -> "Setting":
        """The setting a field of Settings declares: its name upper case, its metadata the rest."""
        return cls(name=field.name.upper(), default=field.default, **field.metadata)


def specs_of(settings: type) -> dict[str, Setting]:
    """NAME -> Setting for every field of a settings dataclass, in declaration order."""
    return _specs_of(settings)


# Cached apart from specs_of: mypy takes no `type[T]` of a TypeVar (the rules' cls) for the Hashable
# a cached function's arguments must be (python/mypy#11470, #20409), while a plain `type` it takes.
@functools.cache
def _specs_of(settings: type) -> dict[str, Setting]:
    return {spec.name: spec for spec in map(Setting.of, dataclasses.fields(settings))}


class SettingsRules:
    """What every `Settings` does beyond holding its values (the dataclass itself, one field per
    setting with its default and rules, is declared in core/settings.py)."""

    # What the rules read of the settings, as the type checker (pyproject.toml's [tool.mypy]) holds
    # every subclass to it: the dataclass's own fields, each declared there with its default and
    # grammar. Annotations only: a class that is no dataclass gives a dataclass below it no field,
    # and core/settings.py (_check_declared_types) holds each name to a field of Settings.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    strategy: str
    workers: int
    replicas: int
    gpus: str
    ps: int
    chief: int
    evaluator: int
    global_batch: int
    examples: int
    loop: str
    precision: str
    precisions: str
    collective: str
    backend: str
    platform: str
    tf: str
    keras: str
    heal: str
    scenario: str
    script: str
    args: str
    script_env: str
    data: str
    tfjob: str
    trainjob: str
    claims: str
    backoff: float

    @property
    def gpu_indexes(self) -> tuple[str, ...]:
        """The GPUs GPUS names one by one; empty for GPUS=all (the host's list) and for no GPUs."""
        return tuple(self.gpus.split(",")) if self.gpus not in ("", "all") else ()

    @property
    def replicas_in_sync(self) -> int:
        """Replicas a step's global batch is split over, as the host can know it. Mirrored takes
        every GPU it is given; with GPUS=all their number is the trainer's to find (it checks)."""
        if self.strategy == "multiworker":
            return self.workers + self.chief  # TF counts the chief as one more worker
        if self.strategy == "mirrored":
            return len(self.gpu_indexes) or self.replicas
        return 1  # single; parameter_server: each step is one worker's, on a whole global batch

    @property
    def steps_per_epoch(self) -> int:
        return self.examples // self.global_batch

    @classmethod
    def from_env(cls: type[AnySettings], env: Mapping[str, str],
                 overrides: Mapping[str, str] | None = None) -> AnySettings:
        """Settings from NAME=value pairs: `overrides` win over `env`; unknown overrides are refused,
        and so are the Makefile's command-line variables that are no setting (check_make_variables).
        An empty environment variable is the default; a value given by name (an argument, a make
        variable), and a blank one anywhere, is refused empty where the table allows no empty one."""
        overrides, specs = dict(overrides or {}), specs_of(cls)
        unknown = sorted(set(overrides) - set(specs))
        if unknown:
            close = difflib.get_close_matches(unknown[0].upper(), specs, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"allowed settings: {', '.join(specs)}"
            hint += script_env_hint(unknown[0], {**env, **overrides})  # KERAS_HOME: close to KERAS, meant for a script
            raise SettingsError(f"unknown setting {unknown[0]}; {hint}")
        check_make_variables(env, specs)
        # Given by name (an argument, or on make's command line, where make strips a blank value
        # to nothing) an empty value is refused too; an empty environment variable is unset.
        given = set(overrides) | set(env.get(MAKE_VARIABLES_ENV, "").split())
        values = {}
        for name, spec in specs.items():
            raw = overrides.get(name, env.get(name, ""))
            if raw.strip() == "" and spec.left_out and name in given:
                raise empty_refusal(spec, raw)
            if raw.strip() == "" and (spec.empty_allowed or (raw == "" and name not in given)):
                continue
            if raw.strip() == "":
                raise SettingsError(f"{name}={raw!r} is not allowed: an empty or blank value is not the default; "
                                    f"expected {spec.allowed} (leave {name} out for {_shown_default(spec)})")
            _one_line(name, raw.strip())
            value = spec.parse(name, raw.strip())
            if spec.on_host:
                assert isinstance(value, str), f"{name}: on_host on a setting of {type(value)}"  # settings.py: str only
                value = spec.on_host(name, value)
            values[spec.field] = value
        return cls(**values).validated()

    @classmethod
    def from_dict(cls: type[AnySettings], data: Mapping[str, object]) -> AnySettings:
        """Settings saved by `to_dict` (config.json), checked again with the same rules as
        `from_env`, less what only the host can check (SCRIPT exists, RUNS_DIR is a folder):
        the trainer reads them where the host's files are not. A missing key is its default."""
        if not isinstance(data, Mapping):
            raise SettingsError(f"settings are {_json(data)}, not an object of settings")
        by_field = {spec.field: spec for spec in specs_of(cls).values()}
        unknown = sorted(str(key) for key in data if key not in by_field)
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r}; allowed settings: {', '.join(by_field)}")
        return cls(**{key: _typed(by_field[key], value) for key, value in data.items()}).validated()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self: AnySettings, **changes) -> AnySettings:
        return dataclasses.replace(self, **changes).validated()

    def validated(self: AnySettings) -> AnySettings:
        """Every setting's own check (so that `replace` and `from_dict` take no value `from_env`
        would refuse), then the checks that involve more than one; raises SettingsError."""
        for spec in specs_of(type(self)).values():
            _typed(spec, getattr(self, spec.field))
        replicas = self.replicas_in_sync
        if self.global_batch % replicas:
            below = self.global_batch - self.global_batch % replicas
            nearest = " or ".join(str(n) for n in (below, below + replicas) if n > 0)
            counted = ("WORKERS+CHIEF" if self.chief else "WORKERS") if self.strategy == "multiworker" \
                else "GPUS" if self.gpu_indexes else "REPLICAS"
            raise SettingsError(
                f"GLOBAL_BATCH={self.global_batch} is not divisible by the {replicas} replicas of "
                f"STRATEGY={self.strategy}; allowed: a multiple of {replicas}, such as {nearest}, "
                f"or a {counted} count that divides {self.global_batch}"
            )
        if self.chief and self.strategy != "multiworker":
            raise SettingsError(f"CHIEF={self.chief} is not allowed with STRATEGY={self.strategy}: expected "
                                "STRATEGY=multiworker (parameter_server always has its chief), or CHIEF=0")
        if self.evaluator and self.strategy not in EVALUATOR_STRATEGIES:
            raise SettingsError(f"EVALUATOR={self.evaluator} is not allowed with STRATEGY={self.strategy}: "
                                f"expected STRATEGY={' or '.join(EVALUATOR_STRATEGIES)}, or EVALUATOR=0")
        if self.strategy == "parameter_server" and self.ps < 1:
            raise SettingsError(f"PS={self.ps} is not allowed with STRATEGY=parameter_server: "
                                "expected 1 or more parameter servers")
        if self.loop == "custom" and self.strategy == "parameter_server":
            raise SettingsError("LOOP=custom is not allowed with STRATEGY=parameter_server: "
                                "expected LOOP=fit (the custom loop is for the synchronous strategies)")
        if self.precision == "mixed_float16" and self.strategy == "parameter_server":
            # tf-keras's LossScaleOptimizer raises for it (strategy_supports_loss_scaling: variables on the ps
            # would be unscaled once per worker); bfloat16 needs no loss scaling.
            raise SettingsError("PRECISION=mixed_float16 is not allowed with STRATEGY=parameter_server: Keras "
                                "scales no loss under it; expected PRECISION=float32 or mixed_bfloat16")
        mixed = [word for word in f"{self.precision} {self.precisions}".split() if word != "float32"]
        if self.script and mixed:
            # The policy is the lab's trainer's own call (trainer/train.py's set_global_policy): a script
            # builds its model itself, and nothing the lab could set reaches it, so it would train at float32.
            given = f"PRECISION={self.precision}" if self.precision != "float32" else f"PRECISIONS={self.precisions}"
            raise SettingsError(f"{given} is not allowed with SCRIPT={self.script}: the precision is the lab's "
                                "trainer's, and a script sets its own (tf.keras.mixed_precision.set_global_policy "
                                "in it); expected PRECISION=float32 and PRECISIONS empty with SCRIPT")
        if self.heal == "never" and self.scenario not in ("partition", "hang"):
            raise SettingsError(f"HEAL=never is not allowed with SCENARIO={self.scenario}: "
                                "expected seconds (only a partition or a hang may stay)")
        if self.args and not self.script:
            raise SettingsError(f"ARGS={self.args!r} is not allowed without SCRIPT: expected SCRIPT=path/to/train.py "
                                "(the lab's own trainer takes its settings, not arguments)")
        for given, shown in ((self.script_env, "SCRIPT_ENV"), (self.data, "DATA")):
            if given and not self.script and not (shown == "DATA" and (self.tfjob or self.trainjob)):
                raise SettingsError(f"{shown}={given} is not allowed without SCRIPT: expected SCRIPT=path/to/train.py "
                                    "(the lab's own trainer needs neither)")
        if self.claims and not (self.tfjob or self.trainjob):
            raise SettingsError(f"CLAIMS={self.claims} is not allowed without TFJOB or TRAINJOB: expected "
                                "TFJOB=path/to/tfjob.yaml (the claims are a replayed job's; a SCRIPT reads DATA)")
        if self.backoff != 10.0 and not (self.tfjob or self.trainjob):
            raise SettingsError(f"BACKOFF={self.backoff:g} is not allowed without TFJOB or TRAINJOB: expected "
                                "TFJOB=path/to/tfjob.yaml or TRAINJOB=path/to/trainjob.yaml (the back-off is a "
                                "replayed job's restart of one replica; the lab's own runs restart the whole job "
                                "at once)")
        if self.collective == "nccl" and not self.gpus:
            raise SettingsError("COLLECTIVE=nccl is not allowed without GPUS: expected GPUS=all or GPU indexes "
                                "such as GPUS=0,1 (NCCL runs on GPUs only), or COLLECTIVE=auto or ring")
        if self.gpus and self.platform == "linux/arm64":
            raise SettingsError(f"GPUS={self.gpus} is not allowed with PLATFORM=linux/arm64: {GPU_IMAGE_AMD64_ONLY}; "
                                "leave GPUS empty, or PLATFORM empty or linux/amd64")
        if self.platform and not capabilities(self.backend).containers:
            raise SettingsError(f"PLATFORM={self.platform} is not allowed with BACKEND={self.backend}: local processes "
                                f"run on this machine's own Python; expected BACKEND={those_with('containers')}, or "
                                "PLATFORM empty")
        if self.gpus and not capabilities(self.backend).gpus:
            raise SettingsError(f"GPUS={self.gpus} is not allowed with BACKEND={self.backend}: expected "
                                f"BACKEND={those_with('gpus')} (the lab hands GPUs to containers), or GPUS empty")
        _check_versions(self)
        refusal = keras3_refusal(self)
        if refusal:
            raise SettingsError(refusal)
        if self.examples < self.global_batch:
            raise SettingsError(
                f"EXAMPLES={self.examples} is smaller than GLOBAL_BATCH={self.global_batch}; "
                "allowed: at least one global batch of examples"
            )
        return self


def _json(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _typed(spec: Setting, value: object) -> object:
    """A value as config.json holds it (or as code passed it to `replace`), checked by the
    setting's own parser: the right JSON type, and the very value `from_env` would give."""
    name = spec.name
    kind = type(spec.default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise SettingsError(f"{name}={_json(value)} is not allowed: expected {spec.allowed}")
    if value == "" and spec.empty_allowed:
        return value
    text = repr(value) if kind is float else str(value)
    if kind is str and text != text.strip():
        raise SettingsError(f"{name}={text!r} is not allowed: expected {spec.allowed}, without spaces around it")
    _one_line(name, text)
    parsed = spec.parse(name, text)
    if parsed != value:
        raise SettingsError(f"{name}={text} is not allowed: expected {spec.allowed}, written as {parsed}")
    return value


def empty_refusal(spec: Setting, raw: str) -> SettingsError:
    """An empty value of a setting whose empty default is meant by leaving it out (Setting.left_out):
    given by name, or set in the environment for a command that reads it (cli/protocol.py)."""
    allowed = spec.allowed.removeprefix("empty | ")
    return SettingsError(f"{spec.name}={raw!r} is not allowed: an empty {spec.name} is taken for a mistake (a "
                         f"variable that was empty, as in {spec.name}=$VAR?), not for unset; expected {allowed}, or "
                         f"{spec.name} left out (unset) for {spec.left_out}")


def _one_line(name: str, text: str) -> None:
    """No setting but ARGS (shell syntax, quoted in its errors) takes a control character: a value
    with a line break would also break the one line that refuses it."""
    if name != "ARGS" and not text.isprintable():
        raise SettingsError(f"{name}={text!r} is not allowed: expected printable characters only")


def _shown_default(spec: Setting) -> str:
    default = spec.default
    return f"the default, {default:g}" if isinstance(default, float) else f"the default, {default}"


def _check_versions(settings: "SettingsRules") -> None:
    """TF and KERAS with the rest: one line naming what is allowed (validated calls it)."""
    if not settings.tf and not settings.keras:
        return
    given = " ".join(f"{key}={value}" for key, value in (("TF", settings.tf), ("KERAS", settings.keras)) if value)
    if not capabilities(settings.backend).image_versions:
        raise SettingsError(f"{given} is not allowed with BACKEND={settings.backend}: expected "
                            f"BACKEND={those_with('image_versions')} (the TensorFlow version is the image's), or TF "
                            "and KERAS empty")
    if settings.tf and (settings.gpus or settings.platform == "linux/arm64"):
        raise SettingsError(f"TF={settings.tf} is not allowed with GPUS or PLATFORM=linux/arm64: the lock files "
                            "of TF= are CPU wheels for linux/amd64; leave TF empty for the lab's own image")
    releases = [word for word in settings.keras.split() if versions.is_keras_release(word)]
    if releases and (settings.gpus or settings.platform == "linux/arm64"):
        raise SettingsError(f"KERAS={settings.keras} is not allowed with GPUS or PLATFORM=linux/arm64: the locks of "
                            "a Keras release are CPU wheels for linux/amd64; expected KERAS=keras3, tf-keras or empty")
    if len(settings.tf.split()) <= 1 and len(settings.keras.split()) == 1:
        refusal = versions.keras_refusal(settings.tf, settings.keras)
        if refusal:
            raise SettingsError(refusal)



def keras3_refusal(settings: "SettingsRules") -> str | None:
    """What the lab's own trainer is known not to do under these settings' Keras 3, or None: an
    EVALUATOR, or mixed_float16 over several replicas. validated() refuses it; make matrix marks
    such a cell n/a with its reason (after the first ": ") and runs none of it."""
    own_trainer = not (settings.script or settings.tfjob or settings.trainjob)
    return keras3_evaluator_refusal(settings.tf, settings.keras, settings.evaluator, own_trainer) or \
        keras3_loss_scale_refusal(settings.tf, settings.keras, settings.precision, settings.strategy,
                                  settings.replicas_in_sync, own_trainer)


def keras3_loss_scale_refusal(tf: str, keras: str, precision: str, strategy: str, replicas: int,
                              own_trainer: bool) -> str | None:
    """Why the lab's own trainer cannot scale mixed_float16's loss over these replicas under this TF
    and KERAS, or None. The lab's finding (matrixverdict.KERAS3_LOSS_SCALE, 2026-12-07, TF 2.21 on 2
    logical CPUs): under Keras 3.15.1 and keras-nightly 3.16.0.dev2026102704, mirrored over 2 replicas
    went NaN from epoch 1 (3.15.1 with fit and LOOP=custom alike), while tf-keras trained. Keras 3's
    LossScaleOptimizer checks only the first replica's gradients for inf or NaN before they are
    all-reduced (its _tf_apply, keras#18691, the fix of keras#18666). multiworker's replicas meet the
    same check (not measured: Keras 3's fit fails there sooner, keras3-multiworker). Every Keras 3 the
    lab pins: the releases 3.10 to 3.15 and keras-nightly (KERAS=nightly, and keras3 on TF=next,
    whose lock pins it); make matrix marks such cells n/a. parameter_server is refused
    mixed_float16 under any Keras (validated)."""
    if precision != "mixed_float16" or replicas < 2 or strategy not in ("mirrored", "multiworker") \
            or not own_trainer or len(tf.split()) > 1 or len(keras.split()) > 1:
        return None
    release = versions.keras3_release(tf, keras)
    if release is None:
        return None
    given = " ".join(f"{name}={value}" for name, value in (("TF", tf and versions.label(tf)), ("KERAS", keras))
                     if value)
    way_out = "KERAS=tf-keras" if "tf-keras" in versions.kerases(tf) else \
        f"a TF with tf-keras (TF={versions.DEFAULT} KERAS=tf-keras)"
    return (f"PRECISION=mixed_float16 is not allowed with {given} and STRATEGY={strategy} ({replicas} replicas): "
            f"Keras {versions.KERAS_RELEASES[release]}'s LossScaleOptimizer checks only the first replica's gradients "
            "for inf or NaN, before the all-reduce, so a step where another replica's float16 gradients overflowed is "
            "applied and the loss goes NaN (the lab's own finding on Keras 3.15.1 and keras-nightly "
            f"3.16.0.dev2026102704; related: keras-team/keras#18666); expected PRECISION=mixed_bfloat16, which "
            f"needs no loss scaling, or {way_out}")


def keras3_evaluator_refusal(tf: str, keras: str, evaluator: int, own_trainer: bool) -> str | None:
    """Why the lab's own trainer cannot have EVALUATOR under this TF and KERAS, or None. Its evaluator
    is tf-keras's SidecarEvaluator on the checkpoints of tf-keras's ModelCheckpoint, and under Keras 3
    (KERAS=keras3, a Keras release, or a TF whose tf.keras is Keras 3 by default) there is neither; nor
    would there be a checkpoint to read: the trainer trains under neither strategy EVALUATOR takes (fit
    under multiworker: keras#20585; parameter_server: keras3-parameter-server; LOOP=custom: its
    apply_gradients takes tf-keras's skip_gradients_aggregation). A SCRIPT's or a replayed job's
    evaluator is its own (explain.py's keras3-no-sidecar-evaluator says the same words if it fails)."""
    if not evaluator or not own_trainer or len(tf.split()) > 1 or len(keras.split()) > 1:
        return None
    resolved = versions.keras_for(tf, keras)
    if resolved != "keras3" and not versions.is_keras_release(resolved):
        return None
    given = " ".join(f"{name}={value}" for name, value in (("TF", tf and versions.label(tf)), ("KERAS", keras))
                     if value) + ("" if keras else " (its tf.keras is Keras 3)")
    way_out = "KERAS=tf-keras" if "tf-keras" in versions.kerases(tf) else \
        f"a TF with tf-keras (TF={versions.DEFAULT} KERAS=tf-keras)"
    return (f"EVALUATOR={evaluator} is not allowed with {given}: {KERAS3_NO_EVALUATOR}, and the lab's evaluator is "
            f"tf-keras's; expected {way_out}, or EVALUATOR=0")


def check_declared_types(settings_class: type) -> None:
    """core/settings.py's Settings, as declared: a field's type is its default's, str, int or float
    (config.json and its checks rely on it); a check of the host's files (on_host) is a text
    setting's; and every setting the rules read (SettingsRules' annotations) is a field."""
    name = settings_class.__name__
    fields = dataclasses.fields(settings_class)
    for field in fields:
        if field.type not in (str, int, float) or type(field.default) is not field.type:
            raise TypeError(f"{name}.{field.name}: {field.default!r} is no {field.type}; expected str, int or float")
        if field.metadata["on_host"] is not None and field.type is not str:
            raise TypeError(f"{name}.{field.name}: on_host on a {field.type}; expected it on str settings only")
    undeclared = set(SettingsRules.__annotations__) - {field.name for field in fields} - {"__dataclass_fields__"}
    if undeclared:
        raise TypeError(f"SettingsRules reads {', '.join(sorted(undeclared))}, no field of {name}")
