"""Every setting of the lab: its name, default, what is allowed and what it means, in one place.

Each setting is declared once, in SETTINGS (a `Setting` each: name, default, parser, what is
allowed, what it means, the commands that read it, what a TFJob decides instead); the frozen
`Settings` dataclass, the tables of `make help` and `--help`, and the refusal of a setting given
to a command that never reads it are all made from that declaration.

Settings arrive as environment variables (the Makefile's command-line variables become the
environment of its recipes) or as NAME=value arguments to `python3 -m tflab`. They are parsed
once, here, into a frozen `Settings`; anything not allowed raises `SettingsError` whose message is
one line naming the bad value and what is allowed. The host side writes the resolved settings to
`runs/<RUN>/config.json`; the trainer reads them back from there with `Settings.from_dict`.

This module is shared by the host side and the trainer, so it imports neither TensorFlow nor any
Docker code.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from tflab.core import task, versions
from tflab.core.backends import BACKENDS, capabilities, those_with
from tflab.core.errors import LabError

STRATEGIES = ("single", "mirrored", "multiworker", "parameter_server")
MODELS = ("mlp", "cnn")
LOOPS = ("fit", "custom")
COLLECTIVES = ("auto", "ring", "nccl")
NETWORKS = ("internal", "bridge")
SCENARIOS = ("kill", "stop", "pause", "partition", "slow-link", "slow-node", "preempt")
NOTICES = ("sigterm", "gce", "none")  # SCENARIO=preempt: how the task hears of it (faults/)
LINK_PATTERN = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)ms,([0-9]{1,9}(?:\.[0-9]{1,9})?)mbit")
PLACEMENTS = ("spread", "local")  # BACKEND=swarm: tasks over the swarm's nodes, or all on this one
MAX_SIM_NODES = 8
RESTART_POLICIES = ("ExitCode", "OnFailure", "Never")  # a TFJob's; explain.restart_verdict applies them
COMPOSE_CLIS = ("auto", "v2", "v1")
PLATFORMS = ("linux/amd64", "linux/arm64")
MAX_TASKS = 32  # tasks of one kind; whether they fit the engine's memory is checked per run (backends/__init__.py)
RUN_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
RESERVED_RUNS = ("latest",)  # RUNS_DIR/latest is the link to the newest run
# Kubernetes names (make k8s). A Service name must be a DNS-1035 label (a letter first, 63 at most)
# and the tasks' Services are <K8S_NAME>-worker-31 at the longest, so the name leaves room for that.
K8S_NAME_MAX = 63 - len(f"-worker-{MAX_TASKS - 1}")
K8S_NAME_PATTERN = re.compile(rf"[a-z](?:[a-z0-9-]{{0,{K8S_NAME_MAX - 2}}}[a-z0-9])?")
DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
K8S_NAMESPACE_PATTERN = re.compile(DNS_LABEL)  # DNS-1123 label
K8S_PVC_PATTERN = re.compile(rf"(?=.{{1,253}}$){DNS_LABEL}(?:\.{DNS_LABEL})*")  # DNS-1123 subdomain


DEFAULT_COMPARE = "single mirrored-2 mirrored-4 multiworker-1 multiworker-2 multiworker-4 parameter-server-2"
EVALUATOR_STRATEGIES = ("multiworker", "parameter_server")
COMPARE_ENTRY = re.compile(r"(single)|(mirrored|multiworker|parameter-server)-([0-9]{1,6})")
# Docker's smallest memory limit (the engine refuses less: "Minimum memory limit allowed is 6MB")
# and smallest CPU limit ("Range of CPUs is from 0.01 to ..."); below a millicore Kubernetes would
# get cpu: "0m" too.
MIN_MEMORY_BYTES = 6 * 1024 * 1024
MIN_CPUS = 0.01
MIN_MEMORY = f"{MIN_MEMORY_BYTES // 1024**2}m"  # as MEMORY writes it
# GPUs run on linux/amd64 only: the lab's one GPU image is built from CUDA's wheels, which are.
GPU_IMAGE_AMD64_ONLY = "the GPU image is x86_64 only (CUDA's wheels are linux/amd64)"
MEMORY_FACTORS = {"k": 1024, "m": 1024**2, "g": 1024**3}
# An image reference as Docker's distribution/reference grammar has it: [domain[:port]/]path[:tag][@digest].
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = re.compile(
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# The Makefile's own variables, which `make up NAME=value` may set besides the settings (Makefile).
MAKE_VARIABLES_ENV = "TFLAB_MAKE_VARIABLES"  # the Makefile's command-line variable names
MAKE_OWN_ENV = "TFLAB_MAKE_OWN"  # the Makefile's own overridable variables
MAKE_BROKEN_ENV = "TFLAB_MAKE_BROKEN"  # the pieces of a make variable's name that holds a line break
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")  # what a make variable's name is shown unquoted as

# Which command reads which setting. A setting given by name (NAME=value, a flag, on make's
# command line) to a command that does not read it is refused: the command would drop it silently.
AUDITS = ("on", "strict", "off")  # AUDIT: report findings, fail on them, or look at nothing
RUNS = ("up", "stack-up", "compare", "matrix", "bench", "chaos", "soak", "config", "k8s")  # run or describe one
RUN_FOLDERS = ("report", "summary", "why", "logs", "down", "clean")  # read what runs left


class SettingsError(LabError, ValueError):
    """A setting the lab refuses; str() is the one line a user sees."""


class SettingsRules:
    """What every `Settings` does beyond holding its values (the dataclass itself is generated from
    SETTINGS below, so each setting's field, default and rules are written once)."""

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
    def from_env(cls, env: Mapping[str, str], overrides: Mapping[str, str] = ()) -> "Settings":
        """Settings from NAME=value pairs: `overrides` win over `env`; unknown overrides are refused,
        and so are the Makefile's command-line variables that are no setting (check_make_variables).
        An empty environment variable is the default; a value given by name (an argument, a make
        variable), and a blank one anywhere, is refused empty where the table allows no empty one."""
        overrides = dict(overrides)
        unknown = sorted(set(overrides) - set(SPECS))
        if unknown:
            close = difflib.get_close_matches(unknown[0].upper(), SPECS, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"allowed settings: {', '.join(SPECS)}"
            hint += script_env_hint(unknown[0], {**env, **overrides})  # KERAS_HOME: close to KERAS, meant for a script
            raise SettingsError(f"unknown setting {unknown[0]}; {hint}")
        check_make_variables(env)
        # Given by name (an argument, or on make's command line, where make strips a blank value
        # to nothing) an empty value is refused too; an empty environment variable is unset.
        given = set(overrides) | set(env.get(MAKE_VARIABLES_ENV, "").split())
        values = {}
        for name, spec in SPECS.items():
            raw = overrides.get(name, env.get(name, ""))
            if raw.strip() == "" and (spec.empty_allowed or (raw == "" and name not in given)):
                continue
            if raw.strip() == "":
                raise SettingsError(f"{name}={raw!r} is not allowed: an empty or blank value is not the default; "
                                    f"expected {spec.allowed} (leave {name} out for {_shown_default(name)})")
            _one_line(name, raw.strip())
            value = spec.parse(name, raw.strip())
            values[spec.field] = spec.on_host(name, value) if spec.on_host else value
        return cls(**values).validated()

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "Settings":
        """Settings saved by `to_dict` (config.json), checked again with the same rules as
        `from_env`, less what only the host can check (SCRIPT exists, RUNS_DIR is a folder):
        the trainer reads them where the host's files are not. A missing key is its default."""
        if not isinstance(data, Mapping):
            raise SettingsError(f"settings are {_json(data)}, not an object of settings")
        by_field = {spec.field: name for name, spec in SPECS.items()}
        unknown = sorted(str(key) for key in data if key not in by_field)
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r}; allowed settings: {', '.join(by_field)}")
        return cls(**{key: _typed(by_field[key], value) for key, value in data.items()}).validated()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes).validated()

    def validated(self) -> "Settings":
        """Every setting's own check (so that `replace` and `from_dict` take no value `from_env`
        would refuse), then the checks that involve more than one; raises SettingsError."""
        for name, spec in SPECS.items():
            _typed(name, getattr(self, spec.field))
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
                                f"expected 1..{MAX_TASKS} parameter servers")
        if self.loop == "custom" and self.strategy == "parameter_server":
            raise SettingsError("LOOP=custom is not allowed with STRATEGY=parameter_server: "
                                "expected LOOP=fit (the custom loop is for the synchronous strategies)")
        if self.heal == "never" and self.scenario != "partition":
            raise SettingsError(f"HEAL=never is not allowed with SCENARIO={self.scenario}: "
                                "expected seconds (only a partition may stay)")
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
        if self.examples < self.global_batch:
            raise SettingsError(
                f"EXAMPLES={self.examples} is smaller than GLOBAL_BATCH={self.global_batch}; "
                "allowed: at least one global batch of examples"
            )
        return self


@dataclass(frozen=True)
class Setting:
    """One setting, declared once in SETTINGS: the Settings dataclass, the parsing, `make help`,
    `tflab <command> --help` and which command takes it all come from here."""
    name: str  # as a user gives it; its field in Settings (and config.json) is name.lower()
    default: object  # its type is the field's: str, int or float
    parse: Callable[[str, str], object]  # text -> value, the same on the host and in the trainer
    allowed: str  # what a user may give, for errors and the settings table
    doc: str
    on_host: Callable[[str, object], object] | None = None  # checks of the host's files, from_env only
    # The commands that read it; given by name to any other, it is refused. Most are a run's.
    commands: tuple[str, ...] = RUNS
    # `tflab up TFJOB=`: why the TFJob decides this setting instead (then it is refused with TFJOB),
    # or REPLAYED where the replay reads it; empty where `up` reads it only without a TFJob, or never.
    tfjob: str = ""
    # command -> "make <command>: why", where the setting's very value (from the environment too)
    # cannot be honoured by a command that otherwise runs the settings' training.
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def field(self) -> str:
        return self.name.lower()

    @property
    def empty_allowed(self) -> bool:
        """Empty is a value of its own (CPUs only, a fresh run id, the lab's own script...) exactly
        where it is the default."""
        return self.default == ""


def _json(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _typed(name: str, value: object) -> object:
    """A value as config.json holds it (or as code passed it to `replace`), checked by the
    setting's own parser: the right JSON type, and the very value `from_env` would give."""
    spec = SPECS[name]
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


def _one_line(name: str, text: str) -> None:
    """No setting but ARGS (shell syntax, quoted in its errors) takes a control character: a value
    with a line break would also break the one line that refuses it."""
    if name != "ARGS" and not text.isprintable():
        raise SettingsError(f"{name}={text!r} is not allowed: expected printable characters only")


def _shown_default(name: str) -> str:
    default = default_of(name)
    return f"the default, {default:g}" if isinstance(default, float) else f"the default, {default}"


def given_values(env: Mapping[str, str], overrides: Mapping[str, str] = ()) -> dict[str, str]:
    """The settings a user gave, as given, in the table's order: by name (an argument, a flag, on
    make's command line, which make hands on as environment) or as an environment variable that is
    not blank (from_env takes an empty one as unset)."""
    overrides = dict(overrides)
    return {name: overrides.get(name, env.get(name, "")) for name in SPECS
            if name in overrides or env.get(name, "").strip()}


def named_values(env: Mapping[str, str], overrides: Mapping[str, str] = ()) -> dict[str, str]:
    """The settings a user gave by name for this command: an argument, a flag, or on make's command
    line (TFLAB_MAKE_VARIABLES). An exported variable is not among them: one environment serves
    every command, so each takes from it only what it reads."""
    named = set(overrides) | set(env.get(MAKE_VARIABLES_ENV, "").split())
    return {name: value for name, value in given_values(env, overrides).items() if name in named}


def lab_command(words: str) -> str:
    """A lab command as the user would type it again: `make logs` under make (the Makefile sets
    TFLAB_MAKE_VARIABLES), `tflab logs` from the installed command, `python3 -m tflab logs` from
    `python3 -m tflab`. A fix names the command the user ran, not always make's."""
    if MAKE_VARIABLES_ENV in os.environ:
        return f"make {words}"
    if Path(sys.argv[0]).name == "__main__.py":
        return f"python3 -m tflab {words}"
    return f"tflab {words}"


def command_label(command: str) -> str:
    return "make help" if command == "settings" else f"make {command}"


def refuse_not_read(command: str, named: Mapping[str, str]) -> None:
    """A setting given by name to a command that never reads it, refused in one line naming the
    commands that do: `make summary WORKERS=3` would otherwise say nothing and count nothing.
    Where the setting says why the command cannot honour it (Setting.refused), that check says so."""
    for name, value in named.items():
        spec = SPECS.get(name)
        if spec is None or command in spec.commands or command in spec.refused:
            continue
        shown = value if value.isprintable() and len(value) <= 100 else repr(value[:100])
        readers = "make " + ", ".join(spec.commands)
        raise SettingsError(f"{name}={shown} is not a setting of {command_label(command)} (read by {readers} "
                            f"only); leave it out: `tflab {command} --help` lists the settings it takes")


def refuse_unhonoured(command: str, values: "Mapping[str, object] | SettingsRules") -> None:
    """A value the command cannot honour (Setting.refused), given in any way, the environment too:
    `values` is the settings, or NAME -> value as given."""
    if not isinstance(values, Mapping):
        values = {spec.name: getattr(values, spec.field) for spec in SETTINGS}
    for name, value in values.items():
        refused = SPECS[name].refused.get(command) if name in SPECS else None
        if refused and value not in ("", SPECS[name].default):
            raise SettingsError(f"{name}={value} is not allowed with {refused}")


def settings_of(command: str) -> list[str]:
    """The settings `command` reads, in the table's order."""
    return [spec.name for spec in SETTINGS if command in spec.commands]


def check_make_variables(env: Mapping[str, str]) -> None:
    """`make up WORKER=3`: make takes any NAME=value, so the Makefile hands the lab the names of
    its command-line variables (TFLAB_MAKE_VARIABLES) and of its own (TFLAB_MAKE_OWN), and a name
    that is neither a setting nor the Makefile's is refused here, naming what it resembles. A name
    is shown as given where it is plain, else escaped as Python writes it: it may hold quotes,
    `$`, escape sequences."""
    broken = env.get(MAKE_BROKEN_ENV, "").split()
    if broken:
        raise SettingsError(f"a make variable's name holds a line break (around {_shown_name(broken[0])}); "
                            "a setting's name is upper-case letters, digits and _")
    own = env.get(MAKE_OWN_ENV, "").split()
    for name in env.get(MAKE_VARIABLES_ENV, "").split():
        if name in SPECS or name in own:
            continue
        value = env.get(name, "")
        close = difflib.get_close_matches(name.upper(), [*SPECS, *own], n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "`make help` lists the settings"
        hint += script_env_hint(name, env)
        case = " (settings are upper case)" if name.upper() in SPECS else ""
        if not PLAIN_NAME.fullmatch(name):
            raise SettingsError(f"make variable {_shown_name(name)} is not a setting: a setting's name is upper-case "
                                f"letters, digits and _; {hint}")
        shown = value if value.isprintable() and len(value) <= 100 else repr(value[:100])
        raise SettingsError(f"{name}={shown} is not a setting{case}; {hint}")


def _shown_name(name: str) -> str:
    """A name as a message quotes it: repr escapes every quote, control character and escape sequence."""
    return repr(name[:100]) + ("..." if len(name) > 100 else "")


# Every pattern below spells its digits [0-9]: Python's \d and str.isdigit also take other
# scripts' digits (٣, ²), which int() may refuse or Docker and Kubernetes would.
def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]{1,20}", raw) or not low <= int(raw) <= high:
            raise SettingsError(f"{name}={raw} is not allowed: expected an integer from {low} to {high}")
        return int(raw)

    parse.range = (low, high)  # for the property test (tests/unit/test_settings_property.py)
    return parse


DECIMAL = re.compile(r"[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12}")


def _number(low: float, high: float, what: str = "seconds", zero: str = "") -> Callable[[str, str], float]:
    """A decimal number from low to high (or exactly 0, where `zero` says what it means)."""
    def parse(name: str, raw: str) -> float:
        value = float(raw) if DECIMAL.fullmatch(raw) else float("nan")
        if not (low <= value <= high or (zero and value == 0)):  # also false for nan
            expected = f"{what} from {low:g} to {high:g}" + (f", or 0 ({zero})" if zero else "")
            raise SettingsError(f"{name}={raw} is not allowed: expected {expected}")
        return value

    parse.range = (low, high)
    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in choices:
            raise SettingsError(f"{name}={raw} is not allowed: expected one of {', '.join(choices)}")
        return raw

    parse.choices = choices
    return parse


def _run_id(name: str, raw: str) -> str:
    if raw in RESERVED_RUNS:
        raise SettingsError(f"{name}={raw} is not allowed: {raw} is the lab's link to the newest run; "
                            "expected another name (leave RUN empty for the newest, or for a fresh id)")
    if not RUN_ID_PATTERN.fullmatch(raw):
        raise SettingsError(
            f"{name}={raw} is not allowed: expected lowercase letters, digits and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return raw


def _compare(name: str, raw: str) -> str:
    entries = raw.split()
    bad = [entry for entry in entries if not COMPARE_ENTRY.fullmatch(entry)]
    if bad or not entries or len(set(entries)) != len(entries):
        what = f"entry {bad[0]}" if bad else "a repeated entry" if entries else "nothing"
        raise SettingsError(f"{name}={raw!r} is not allowed ({what}): expected distinct entries such as "
                            "single mirrored-2 multiworker-4 parameter-server-2")
    for entry in entries:
        count = COMPARE_ENTRY.fullmatch(entry).group(3)
        if count is not None and not 1 <= int(count) <= MAX_TASKS:
            raise SettingsError(f"{name}={raw!r} is not allowed (entry {entry}): expected a count from 1 to "
                                f"{MAX_TASKS}, such as {entry.rsplit('-', 1)[0]}-2")
    return " ".join(entries)


def _backup(name: str, raw: str) -> str:
    if raw in ("epoch", "off") or (re.fullmatch(r"[0-9]{1,9}", raw) and int(raw) > 0):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch, off, or a number of steps from 1 to 999999999")


def _memory(name: str, raw: str) -> str:
    match = re.fullmatch(r"([0-9]{1,12})([kmg])", raw)
    if raw == "0" or (match and int(match.group(1)) * MEMORY_FACTORS[match.group(2)] >= MIN_MEMORY_BYTES):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected 0 (no limit) or a size of at least {MIN_MEMORY} "
                        "(Docker's minimum), such as 512m or 2g")


def _link(name: str, raw: str) -> str:
    match = LINK_PATTERN.fullmatch(raw)
    if match and float(match.group(2)) > 0:
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected <latency>ms,<rate>mbit such as 1ms,1000mbit")


def _moment(name: str, raw: str) -> str:
    kind, _, value = raw.partition(":")
    if (kind == "epoch" and re.fullmatch(r"[0-9]{1,5}", value)) or (
            kind == "seconds" and re.fullmatch(r"[0-9]{1,6}(?:\.[0-9]{1,6})?", value)):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch:N (after N epochs) or seconds:S")


def _heal(name: str, raw: str) -> str:
    if raw == "never" or re.fullmatch(r"[0-9]{1,6}(?:\.[0-9]{1,6})?", raw):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected seconds, or never")


def _gpus(name: str, raw: str) -> str:
    indexes = raw.split(",")
    if raw == "all" or (all(re.fullmatch(r"[0-9]{1,4}", index) for index in indexes)
                        and len({int(index) for index in indexes}) == len(indexes)):
        return raw if raw == "all" else ",".join(str(int(index)) for index in indexes)
    raise SettingsError(f"{name}={raw} is not allowed: expected all, or distinct GPU indexes such as 0,1 "
                        "(empty: CPUs only)")


def _k8s_name(pattern: re.Pattern, what: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if not pattern.fullmatch(raw):
            raise SettingsError(f"{name}={raw} is not allowed: expected {what}")
        return raw

    return parse


def _printable(name: str, raw: str) -> str:
    if not raw.isprintable():
        raise SettingsError(f"{name}={raw!r} is not allowed: expected printable characters only")
    return raw


def _text(name: str, raw: str) -> str:
    if any(c.isspace() for c in raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a value without spaces")
    return _printable(name, raw)


def _folder(name: str, raw: str) -> str:
    _printable(name, raw)
    if ":" in raw:
        raise SettingsError(f"{name}={raw} is not allowed: expected a path without ':' (Docker's volume syntax "
                            "splits at ':', so the folder could not be mounted)")
    return raw


def _folder_on_host(name: str, value: str) -> str:
    """The folder a user names: no spaces in what they type (the lab's own absolute paths may
    have them), and not a file."""
    _text(name, value)
    path = Path(value).absolute()
    if ":" in str(path):
        raise SettingsError(f"{name}={value} is not allowed: its path {path} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a folder whose path has none")
    try:
        is_file = path.exists() and not path.is_dir()
    except OSError as error:  # a name too long, say
        raise SettingsError(f"{name}={value} is not allowed ({error.strerror}): expected a folder") from None
    if is_file:
        raise SettingsError(f"{name}={value} is not allowed: {path} is a file; expected a folder (or a path "
                            "that does not exist yet)")
    return value


def _image(name: str, raw: str) -> str:
    if len(raw) > 512 or not IMAGE_PATTERN.fullmatch(raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected an image reference such as "
                            "python:3.11-slim or registry.example.com:5000/team/tflab-trainer:1.0 (lowercase "
                            "name, optional :tag and @digest, never starting with '-')")
    return raw


REGISTRY_PATTERN = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?")


def _registry(name: str, raw: str) -> str:
    port = raw.rsplit(":", 1)[1] if ":" in raw else "1"
    if len(raw) > 255 or not REGISTRY_PATTERN.fullmatch(raw) or not 0 < int(port) < 65536:
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a registry's host:port, such as "
                            "198.18.213.1:5000 or registry.example.com:5000 (no scheme, no path)")
    return raw


NODE_ENGINE_PATTERN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,62})=((?:ssh|tcp|unix)://[^\s=]+)")


def _node_engines(name: str, raw: str) -> str:
    entries = raw.split()
    bad = [entry for entry in entries if not NODE_ENGINE_PATTERN.fullmatch(entry)]
    hosts = [entry.split("=", 1)[0] for entry in entries]
    if bad or not entries or len(set(hosts)) != len(hosts):
        what = f"entry {bad[0]}" if bad else "a node named twice"
        raise SettingsError(f"{name}={raw!r} is not allowed ({what}): expected hostname=engine entries, such as "
                            "node-2=ssh://admin@node-2 node-3=tcp://10.0.0.3:2376 (the docker CLI's -H)")
    return " ".join(entries)


def _script(name: str, raw: str) -> str:
    _printable(name, raw)
    if not raw.endswith(".py") or ":" in raw:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing Python file (*.py), "
                            "without ':' (Docker's volume syntax splits at ':')")
    return raw


def _existing_file(raw: str, suffixes: tuple[str, ...] = ()) -> str:
    """The file's resolved path, or "" where there is no such file (with one of `suffixes`)."""
    try:
        path = Path(raw).expanduser()
        found = path.is_file() and (not suffixes or path.suffix in suffixes)
        return str(path.resolve()) if found else ""
    except (OSError, RuntimeError):  # a name too long; ~user of no such user
        return ""


def _script_on_host(name: str, raw: str) -> str:
    resolved = _existing_file(raw, (".py",))
    if not resolved:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing Python file (*.py)")
    if ":" in resolved:
        raise SettingsError(f"{name}={raw} is not allowed: its path {resolved} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a script whose path has none")
    try:
        mode = os.stat(resolved).st_mode & 0o7777
    except OSError:
        mode = 0
    # Root reads any file, so root's os.access says yes to a mode-000 script; the tasks (uid 1000
    # when the lab runs as root, user_script.py) could not, even in a copy, and would fail inside.
    if not os.access(resolved, os.R_OK) or (os.getuid() == 0 and not mode & 0o444):
        reader = "no one but root" if os.getuid() == 0 else f"not you (uid {os.getuid()}), as whom the tasks run"
        raise SettingsError(f"{name}={raw} is not allowed: {resolved} has mode {mode:04o}, readable by {reader}; "
                            f"expected a script the tasks can read: chmod a+r {resolved}")
    return resolved


def _tfjob(name: str, raw: str) -> str:
    _printable(name, raw)
    if not raw.endswith((".yaml", ".yml", ".json")):
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of a TFJob manifest (*.yaml, *.yml "
                            "or *.json)")
    return raw


def _tfjob_on_host(name: str, raw: str) -> str:
    resolved = _existing_file(raw)
    if not resolved:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing TFJob manifest")
    return resolved


def _manifest(what: str) -> Callable[[str, str], str]:
    """TRAINJOB and RUNTIME: a manifest's path, as TFJOB's."""
    def parse(name: str, raw: str) -> str:
        _printable(name, raw)
        if raw and not raw.endswith((".yaml", ".yml", ".json")):
            raise SettingsError(f"{name}={raw} is not allowed: expected the path of {what} (*.yaml, *.yml or *.json)")
        return raw

    return parse


def _manifest_on_host(what: str) -> Callable[[str, str], str]:
    def check(name: str, raw: str) -> str:
        resolved = _existing_file(raw)
        if not resolved:
            raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing {what}")
        return resolved

    return check


def _args(name: str, raw: str) -> str:
    if "\0" in raw:
        raise SettingsError(f"{name}={raw!r} is not allowed: expected arguments without NUL characters")
    try:
        shlex.split(raw)
    except ValueError as error:
        raise SettingsError(f"{name}={raw!r} is not allowed ({error}): expected arguments as a shell "
                            "would split them") from None
    return raw


# SCRIPT_ENV and DATA: what a cluster gives a script besides TF_CONFIG. An environment variable's
# name is what the API server takes in a TFJob's env (manifest.py checks a replay's with this
# pattern); the lab's own names are not the script's to set.
ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
LAB_ENV_NAMES = ("TF_CONFIG", "PYTHONPATH")  # the cluster the lab wrote; where its launcher is found
LAB_ENV_PREFIX = "TFLAB_"
# Names a task needs as the image has them, each with why: set, the launcher never starts, and the
# task fails with a line that names neither the variable nor SCRIPT_ENV.
IMAGE_ENV_NAMES = {
    "PATH": "how each task finds the image's python, which starts the lab's launcher",
    "PYTHONHOME": "where the image's python finds its own standard library",
    "PYTHONPLATLIBDIR": "where the image's python finds its own standard library",
}
# Names a setting decides: set here too, SCRIPT_ENV's value would win over the setting without a word.
SETTING_ENV_NAMES = {
    name: "KERAS's to set (1 for KERAS=tf-keras, 0 for keras3 and bundled); expected KERAS=tf-keras or "
          "KERAS=keras3 instead" for name in task.LEGACY_KERAS  # the task contract's name, spelled there only
}
DATA_DIR = "/lab/data"  # where DATA is mounted in a task, read-only ($TFLAB_DATA)


def script_env_pairs(raw: str) -> list[tuple[str, str]]:
    """SCRIPT_ENV's NAME=value entries, split as a shell would (quote a value with spaces)."""
    return [tuple(entry.split("=", 1)) for entry in shlex.split(raw)]


def script_env_hint(name: str, given: Mapping[str, str]) -> str:
    """For `make up SCRIPT=train.py KERAS_HOME=/x`: an environment variable meant for the script."""
    if not given.get("SCRIPT") or not ENV_VAR_NAME.fullmatch(name):
        return ""
    return f"; for the script's environment: SCRIPT_ENV=\"{name}=...\""


def _script_env(name: str, raw: str) -> str:
    _args(name, raw)
    seen = set()
    for entry in shlex.split(raw):
        key, equals, value = entry.partition("=")
        if not equals or not ENV_VAR_NAME.fullmatch(key):
            raise SettingsError(f"{name}={raw} is not allowed: {entry!r} is not NAME=value with an environment "
                                "variable's name ([-._a-zA-Z][-._a-zA-Z0-9]*, as in a TFJob's env); expected "
                                "entries such as KERAS_HOME=/tmp/keras FOO=bar")
        if key in LAB_ENV_NAMES or key.startswith(LAB_ENV_PREFIX):
            raise SettingsError(f"{name}={raw} is not allowed: {key} is the lab's own ({', '.join(LAB_ENV_NAMES)} "
                                f"and {LAB_ENV_PREFIX}* are set by the lab for every task); expected other names")
        if key in IMAGE_ENV_NAMES:
            raise SettingsError(f"{name}={raw} is not allowed: {key} is the image's, {IMAGE_ENV_NAMES[key]}; "
                                f"expected other names than {', '.join(IMAGE_ENV_NAMES)}")
        if key in SETTING_ENV_NAMES:
            raise SettingsError(f"{name}={raw} is not allowed: {key} is {SETTING_ENV_NAMES[key]}")
        if not value.isprintable():
            raise SettingsError(f"{name}={raw!r} is not allowed: the value of {key} has a control character; "
                                "expected printable characters only")
        if key in seen:
            raise SettingsError(f"{name}={raw} is not allowed: {key} is given twice; give it once")
        seen.add(key)
    return raw


def existing_folder(value: str) -> Path | None:
    """A host folder a setting names, resolved; None where it is no existing folder (or cannot be resolved)."""
    try:
        path = Path(value).expanduser().resolve()
        return path if path.is_dir() else None
    except (OSError, RuntimeError):
        return None


def _data_on_host(name: str, value: str) -> str:
    """An existing folder the tasks can read, resolved; mounted read-only at DATA_DIR."""
    path = existing_folder(value)
    if path is None:
        raise SettingsError(f"{name}={value} is not allowed: expected an existing folder (mounted read-only at "
                            f"{DATA_DIR} in every task)")
    if ":" in str(path):
        raise SettingsError(f"{name}={value} is not allowed: its path {path} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a folder whose path has none")
    # As root the tasks run as uid 1000 (user_script.py), who reads only what everyone may.
    if not os.access(path, os.R_OK | os.X_OK) or (os.getuid() == 0 and os.stat(path).st_mode & 0o005 != 0o005):
        raise SettingsError(f"{name}={value} is not allowed: {path} is not readable by everyone, and the tasks run "
                            f"as another user in a container; expected a folder they can read: chmod -R o+rX {path}")
    return str(path)


# CLAIMS: a TFJob replay's claims given folders of the host, as a cluster's PersistentVolume holds
# data before a job starts and keeps what it wrote. Only from the command line: a manifest names its
# claims, never a host path (a hostPath volume is refused), so what a replica may touch on this host
# is what its user typed.
CLAIM_ENTRY = re.compile(r"([^=,]*)=([^,]*?)(?::(ro|rw))?")


def claim_folders(raw: str) -> dict[str, tuple[str, bool]]:
    """CLAIMS's entries: claim name -> (its folder, read-only). Checked by _claims already."""
    found = {}
    for entry in filter(None, raw.split(",")):
        name, folder, mode = CLAIM_ENTRY.fullmatch(entry).groups()
        found[name] = (folder, mode == "ro")
    return found


def _claims(name: str, raw: str) -> str:
    _text(name, raw)
    expected = ("expected claim=/host/folder[:ro|:rw] entries, comma-separated, such as "
                "data=/srv/mnist:ro,out=runs/out:rw (:rw, writable, where no mode is given)")
    seen = set()
    for entry in raw.split(","):
        match = CLAIM_ENTRY.fullmatch(entry)
        if not match or not match.group(2) or ":" in match.group(2):
            raise SettingsError(f"{name}={raw} is not allowed: {entry!r} is not claim=folder; {expected}")
        if not K8S_PVC_PATTERN.fullmatch(match.group(1)):
            raise SettingsError(f"{name}={raw} is not allowed: {match.group(1)!r} is not a claim's name (a DNS-1123 "
                                f"subdomain: lowercase letters, digits, '-' and '.'); {expected}")
        if match.group(1) in seen:
            raise SettingsError(f"{name}={raw} is not allowed: the claim {match.group(1)} is given twice; give it once")
        seen.add(match.group(1))
    return raw


def _claims_on_host(name: str, raw: str) -> str:
    """Each folder exists and is one, resolved: the replay binds it where the manifest mounts its claim."""
    resolved = []
    for claim, (folder, read_only) in claim_folders(raw).items():
        path = existing_folder(folder)
        if path is None:
            raise SettingsError(f"{name}={raw} is not allowed: {folder}, given to the claim {claim}, is not an "
                                "existing folder; expected a folder of this host (make it first)")
        if ":" in str(path) or "," in str(path):
            raise SettingsError(f"{name}={raw} is not allowed: {claim}'s folder resolves to {path}, which has a ':' "
                                "or ',' (Docker's volume syntax and this setting's split there); expected another")
        resolved.append(f"{claim}={path}:{'ro' if read_only else 'rw'}")
    return ",".join(resolved)


# TF, KERAS and STRATEGIES (versions.py holds the table of versions): one value for a run, a list
# for make matrix (images.trainer_variant refuses a list to a single run).
MATRIX_TF = "2.15 2.18 2.21 next"  # make matrix with TF empty
MATRIX_KERAS = "tf-keras keras3"  # make matrix with KERAS empty
MATRIX_STRATEGIES = ("single", "mirrored", "multiworker")


def _words(name: str, raw: str, parse_one: Callable[[str], str | None], allowed: str) -> str:
    found: list[str] = []
    for word in raw.split():
        value = parse_one(word)
        if value is None:
            raise SettingsError(f"{name}={raw} is not allowed: {word} is not one of {allowed}")
        if value not in found:
            found.append(value)
    return " ".join(found)


def _tf(name: str, raw: str) -> str:
    return _words(name, raw, versions.canonical,
                  f"the TensorFlow versions with Python 3.11 wheels: {versions.ALLOWED} (a list for make matrix)")


def _keras(name: str, raw: str) -> str:
    return _words(name, raw, versions.keras_canonical, versions.KERAS_ALLOWED + " (a list for make matrix)")


def _strategies(name: str, raw: str) -> str:
    return _words(name, raw, lambda word: word if word in MATRIX_STRATEGIES else None,
                  " | ".join(MATRIX_STRATEGIES) + ", one or more")


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


# A value these commands cannot honour, from the environment too, refused when the command starts:
# a user's script where the pods run the lab's. (make chaos and soak time a script's faults by
# its own epochs, which trainer/observe.py logs, or by seconds from its start.)
SCRIPT_REFUSED = {
    "k8s": "make k8s: the manifests run the lab's own trainer (bake your script into an image of yours and "
           "name it in K8S_IMAGE)",
}
# TFJOB, where the TFJob would be taken to shape what a command other than `up` runs or writes.
TFJOB_REFUSED = {command: f"make {command}: only make up (tflab up) and make chaos replay a TFJob, and make k8s "
                          "turns one into a TrainJob; leave TFJOB out"
                 for command in RUNS if command not in ("up", "k8s", "chaos")}
TRAINJOB_REFUSED = {command: f"make {command}: only make up (tflab up) and make chaos replay a TrainJob; leave "
                             "TRAINJOB out"
                    for command in RUNS if command not in ("up", "chaos")}
K8S_RUNTIMES = ("cluster", "namespaced")  # make k8s: a ClusterTrainingRuntime, or a TrainingRuntime in K8S_NAMESPACE
# `tflab up TFJOB=` runs what the TFJob says, so a setting that shapes the cluster or the training
# would be dropped without a word: it is refused, naming what decides it instead (Setting.tfjob).
# The replay reads the REPLAYED ones (TIMEOUT where the TFJob sets no activeDeadlineSeconds).
REPLAYED = "read by the replay"
CONTAINER_FIELD = "spec.tfReplicaSpecs.<type>.template.spec.containers[tensorflow]"  # the operator's container
TRAINED_AS_THE_CONTAINERS_SAY = (
    "the TFJob's containers train as their own command, args and env say (those make k8s writes: as their "
    f"ConfigMap's config.json says); edit {CONTAINER_FIELD}.args or env, or the ConfigMap, or write the "
    "manifests again with make k8s")
OWN_IMAGE = f"the TFJob's containers run their own image, built or pulled beforehand; edit {CONTAINER_FIELD}.image"

SETTINGS: tuple[Setting, ...] = (
    Setting("STRATEGY", "multiworker", _choice(STRATEGIES), " | ".join(STRATEGIES),
            "single: one process, one replica; mirrored: one process, REPLICAS replicas; "
            "multiworker: WORKERS processes, one replica each; parameter_server: a chief, "
            "WORKERS workers and PS parameter servers, asynchronous",
            tfjob="the TFJob's replica types set the strategy; edit spec.tfReplicaSpecs"),
    Setting("WORKERS", 2, _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
            "worker containers (or local processes) for multiworker and parameter_server",
            tfjob="the TFJob's Worker replicas set the workers; "
                  "edit spec.tfReplicaSpecs.Worker.replicas"),
    Setting("REPLICAS", 2, _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
            "mirrored replicas: every GPU if any are visible, else this many logical CPUs",
            tfjob="the TFJob's replicas set the tasks; edit spec.tfReplicaSpecs.<type>.replicas"),
    Setting("GPUS", "", _gpus, "empty | all | GPU indexes such as 0,1",
            "NVIDIA GPUs for the tasks (needs the NVIDIA Container Toolkit): single and mirrored take every "
            "one given; each worker takes one, in turn; empty: CPUs only",
            commands=(*RUNS, "images", "wheels", "tensorboard"),
            tfjob="the replay gives no GPUs (it lists a TFJob's nvidia.com/gpu limits as not applied); "
                  "leave GPUS out"),
    Setting("PS", 1, _integer(0, MAX_TASKS), f"1..{MAX_TASKS} for parameter_server",
            "parameter servers for parameter_server (its chief and workers are the other tasks)",
            tfjob="the TFJob's PS replicas set the parameter servers; "
                  "edit spec.tfReplicaSpecs.PS.replicas"),
    Setting("CHIEF", 0, _integer(0, 1), "0 | 1 (multiworker)",
            "multiworker: 1 adds chief-0, a TFJob's Chief: one more replica, and the one that writes "
            "the model, TensorBoard and checkpoints",
            tfjob="the TFJob's Chief replica sets the chief; edit spec.tfReplicaSpecs.Chief"),
    Setting("EVALUATOR", 0, _integer(0, 1), "0 | 1 (multiworker, parameter_server)",
            "1 adds evaluator-0, outside the cluster: it evaluates each checkpoint the chief writes "
            "(tf-keras SidecarEvaluator) and logs eval events; with SCRIPT it runs the script, "
            "whose TF_CONFIG names task evaluator 0",
            tfjob="the TFJob's Evaluator replica sets the evaluator; "
                  "edit spec.tfReplicaSpecs.Evaluator"),
    Setting("EPOCHS", 10, _integer(1, 10_000), "1..10000", "passes over the data set",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("GLOBAL_BATCH", 64, _integer(1, 1 << 20), "1..1048576, a multiple of the replicas",
            "examples per step summed over every replica, the same for every strategy",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("EXAMPLES", 4096, _integer(1, 100_000_000), "GLOBAL_BATCH..100000000",
            "synthetic examples y = xW + 0.1 noise, generated from SEED",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("SEED", 0, _integer(0, 2**31 - 1), f"0..{2**31 - 1}",
            "seeds the data, the initial weights and TensorFlow's ops",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("MODEL", "mlp", _choice(MODELS), " | ".join(MODELS),
            "mlp: the article's Dense(10)-Dense(1), communication-dominated; "
            "cnn: a small convnet on 32x32x3 images, compute-dominated",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("LOOP", "fit", _choice(LOOPS), " | ".join(LOOPS),
            "fit: Keras model.fit; custom: the lab's own step, one packed all-reduce per step",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("STEPS_PER_EXECUTION", 1, _integer(1, 1000), "1..1000",
            "training steps per call into the compiled step function",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("COLLECTIVE", "auto", _choice(COLLECTIVES), " | ".join(COLLECTIVES),
            "multiworker all-reduce implementation (nccl needs GPUS)",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("BYTES_PER_PACK", 0, _integer(0, 1 << 30), "0..1073741824",
            "multiworker gradient packing hint in bytes; 0 lets TensorFlow decide",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("ALLREDUCE_PROBE", 0, _integer(0, 100_000), "0..100000",
            "after training, time this many bare all-reduces of the gradient's size",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("AUDIT", "on", _choice(AUDITS), " | ".join(AUDITS),
            "the run's audit (docs/audit.md): each worker's input batches, writes and weights, compared "
            "after the run; on: findings are reported; strict: a finding also fails the run; off: no "
            "instrumentation at all",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("RUN", "", _run_id, "empty | [a-z0-9][a-z0-9-]*, not latest nor an existing run",
            "run id; outputs go to RUNS_DIR/<RUN>/ and RUNS_DIR/latest points at the newest",
            # tensorboard serves every run, RUN's among them; it takes RUN as given to every lab command
            commands=(*RUNS, *RUN_FOLDERS, "tensorboard"),
            tfjob=REPLAYED),
    Setting("BACKEND", "compose", _choice(BACKENDS), " | ".join(BACKENDS),
            "compose: a container per task; local: a process per task on loopback, same script; "
            "swarm: a Docker Swarm service per task (make stack-up)",
            commands=tuple(c for c in RUNS if c != "stack-up"),
            tfjob=REPLAYED),
    Setting("PEER_TIMEOUT", 60.0, _number(1, 3600), "1..3600 seconds",
            "how long a trainer waits for its peers before it exits naming the missing ones",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("TIMEOUT", 900.0, _number(10, 86_400), "10..86400 seconds",
            "how long a whole run may take before the lab stops it and reports it failed",
            tfjob=REPLAYED),
    Setting("RUNS_DIR", "runs", _folder, "a folder, no ':' in its path", "where run folders are written",
            on_host=_folder_on_host,
            commands=(*RUNS, *RUN_FOLDERS, "tensorboard"),
            tfjob=REPLAYED),
    Setting("COMPOSE", "auto", _choice(COMPOSE_CLIS), " | ".join(COMPOSE_CLIS),
            "Compose CLI: v2 is `docker compose`, v1 is `docker-compose`; auto prefers v2",
            commands=(*RUNS, "tensorboard"),
            tfjob=REPLAYED),
    Setting("BASE_IMAGE", "", _image, "empty | an image reference",
            "base of the trainer image; empty: python:3.11-slim if it can be had, "
            "else a Debian base built locally with debootstrap",
            commands=(*RUNS, "images", "tensorboard"),
            tfjob=OWN_IMAGE),
    Setting("PLATFORM", "", _choice(PLATFORMS), "empty | " + " | ".join(PLATFORMS),
            "the trainer image's platform; empty: the engine's own (linux/arm64 on Apple Silicon); "
            "another runs emulated (slow; on Linux: scripts/enable-arm64-emulation.sh)",
            commands=(*RUNS, "images", "wheels", "tensorboard"),
            tfjob=OWN_IMAGE),
    Setting("TF", "", _tf, f"empty | {versions.ALLOWED}",
            "the TensorFlow of the trainer image (one image per version, tagged cpu-tf<version>); empty: the "
            f"lab's own, {versions.DEFAULT}; make matrix: a list, empty: {MATRIX_TF}",
            commands=("up", "compare", "chaos", "soak", "images", "wheels", "matrix"),
            tfjob=OWN_IMAGE),
    Setting("KERAS", "", _keras, "empty | " + versions.KERAS_ALLOWED,
            "tf.keras: keras3 (TF 2.16 on), tf-keras (tf_keras, TF_USE_LEGACY_KERAS=1; TF 2.14 to 2.21) or bundled "
            "(Keras 2, TF <= 2.15), or a Keras release in place of the TF line's own (3.10 .. 3.15, nightly: "
            f"{versions.keras_label('nightly')}; TF 2.16 on); empty: tf-keras from 2.16, else bundled; make matrix: "
            "a list, empty: "
            f"{MATRIX_KERAS}",
            commands=("up", "compare", "chaos", "soak", "images", "wheels", "matrix"),
            tfjob=OWN_IMAGE),
    Setting("STRATEGIES", "mirrored multiworker", _strategies, " | ".join(MATRIX_STRATEGIES) + ", one or more",
            "make matrix: the strategies each TF and KERAS runs with (WORKERS, REPLICAS as set)",
            commands=("matrix",)),
    Setting("COMPARE", DEFAULT_COMPARE, _compare,
            f"entries single, mirrored-N, multiworker-N, parameter-server-N (N: 1..{MAX_TASKS})",
            "the runs `make compare` makes, side by side, with every other setting shared",
            commands=("compare",)),
    Setting("RESTARTS", 2, _integer(0, 10), "0..10",
            "times the lab restarts the whole cluster after a task fails; the lab's trainer resumes from its "
            "backup, a SCRIPT where its own lets it (the lab says where it did)",
            tfjob="the TFJob's spec.runPolicy.backoffLimit bounds its restarts as the operator counts them, and "
                  "without one there is no limit (the operator sets none; activeDeadlineSeconds or TIMEOUT still "
                  "ends the run); edit spec.runPolicy.backoffLimit"),
    Setting("RESTART_POLICY", "ExitCode", _choice(RESTART_POLICIES), " | ".join(RESTART_POLICIES),
            "which failures the lab restarts, as a TFJob's: ExitCode: exit codes 128 and up "
            "(killed), a preemption or a lost peer, never a known bug or a memory kill; "
            "OnFailure: every failure; Never: none. RESTARTS bounds them",
            tfjob="the TFJob's restart policies say which failures restart; "
                  "edit spec.tfReplicaSpecs.<type>.restartPolicy"),
    Setting("BACKUP", "epoch", _backup, "epoch | off | N steps",
            "how often training backs itself up (tf-keras BackupAndRestore) in RUNS_DIR/<RUN>/backup",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY),
    Setting("CPUS", 0.0, _number(MIN_CPUS, 64, "CPUs", zero="no limit"),
            f"0 | {MIN_CPUS:g}..64, at most the engine's",
            "CPU limit of every task's container, to imitate small nodes; 0: none",
            tfjob=f"the TFJob's CPU limits apply; edit {CONTAINER_FIELD}.resources.limits.cpu"),
    Setting("MEMORY", "0", _memory, f"0 | <n>k | <n>m | <n>g, at least {MIN_MEMORY}",
            "memory limit of every task's container; 0: none",
            tfjob="the TFJob's memory limits apply; "
                  f"edit {CONTAINER_FIELD}.resources.limits.memory"),
    Setting("NETWORK", "internal", _choice(NETWORKS), " | ".join(NETWORKS),
            "internal: the tasks' network has no route out and the host has no address on it; "
            "bridge: Docker's usual bridge (a TFJob replay's replicas too: out, as a cluster's pods)",
            tfjob=REPLAYED),
    Setting("LINK", "", _link, "empty | <latency>ms,<rate>mbit",
            "every task's inbound link through a delay proxy, e.g. 1ms,1000mbit; empty: direct",
            tfjob="the replay's tasks talk directly; leave LINK out"),
    Setting("SCENARIO", "kill", _choice(SCENARIOS), " | ".join(SCENARIOS), "make chaos: the fault to inject",
            commands=("chaos",)),
    Setting("TARGET", "", _text, "a task of the run; empty: the last worker", "make chaos: the task it hits",
            commands=("chaos",)),
    Setting("AT", "epoch:2", _moment, "epoch:N | seconds:S",
            "make chaos: after the target's Nth epoch (a SCRIPT's: as Keras counts them, every fit's), or S "
            "seconds after it is ready (a SCRIPT: after it started)",
            commands=("chaos",)),
    Setting("HEAL", "5", _heal, "seconds | never (partition only)",
            "make chaos: when a pause or partition is undone",
            commands=("chaos",)),
    Setting("NOTICE", "sigterm", _choice(NOTICES), " | ".join(NOTICES),
            "make chaos SCENARIO=preempt: how the task hears of it: sigterm (Kubernetes), gce (the metadata "
            "server's maintenance-event and preempted turn, GCE_METADATA_IP), none (no word)",
            commands=("chaos", "soak")),
    Setting("GRACE", 30, _integer(0, 3600), "0..3600 seconds",
            "make chaos SCENARIO=preempt: seconds from the notice to SIGKILL, as terminationGracePeriodSeconds",
            commands=("chaos", "soak")),
    Setting("SLOW_LINK", "10ms,100mbit", _link, "<latency>ms,<rate>mbit",
            "make chaos SCENARIO=slow-link: the link the target gets from AT on",
            commands=("chaos", "soak")),
    Setting("SLOW_CPUS", 0.25, _number(MIN_CPUS, 64, "CPUs"), f"{MIN_CPUS:g}..64",
            "make chaos SCENARIO=slow-node: the target's CPUs",
            commands=("chaos", "soak")),
    Setting("SOAK", 20, _integer(1, 1000), "1..1000", "make soak: how many random scenarios it runs",
            commands=("soak",)),
    Setting("SCRIPT", "", _script, "empty | path/to/train.py, no ':' in its path",
            "your own training script, unmodified, in every task with the generated TF_CONFIG; "
            "empty: the lab's own", on_host=_script_on_host,
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob="the TFJob's containers run their own command; "
                  f"edit {CONTAINER_FIELD}.command and args", refused=SCRIPT_REFUSED),
    Setting("ARGS", "", _args, "arguments", "arguments for SCRIPT, split as a shell would",
            tfjob=f"the TFJob's containers run their own arguments; edit {CONTAINER_FIELD}.args"),
    Setting("SCRIPT_ENV", "", _script_env, "empty | NAME=value ..., split as a shell would",
            "environment variables for SCRIPT's every task, as a TFJob's env gives them (not TF_CONFIG, "
            "PYTHONPATH, TFLAB_*, PATH, PYTHONHOME nor TF_USE_LEGACY_KERAS: KERAS sets it), e.g. "
            "KERAS_HOME=/lab/data/keras",
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob=f"the TFJob's containers get their own env; edit {CONTAINER_FIELD}.env"),
    Setting("DATA", "", _folder, "empty | path/to/folder, no ':' in its path",
            f"a data folder for SCRIPT or a TFJob replay, mounted read-only at {DATA_DIR} in every task ($TFLAB_DATA "
            "says where; BACKEND=local: the folder itself)", on_host=_data_on_host,
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob=REPLAYED),
    Setting("TFJOB", "", _tfjob, "empty | path/to/tfjob.yaml",
            "tflab up: replay a Kubeflow TFJob (kubeflow.org/v1) and the ConfigMaps in its file, each "
            "replica a task on Compose, with the operator's TF_CONFIG; make k8s: write it as a Kubeflow "
            "Trainer v2 TrainJob and runtime", on_host=_tfjob_on_host,
            commands=("up", "k8s", "chaos"),
            tfjob=REPLAYED, refused=TFJOB_REFUSED),
    Setting("TRAINJOB", "", _manifest("a TrainJob manifest"), "empty | path/to/trainjob.yaml",
            "tflab up: replay a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1), its TensorFlow "
            "runtime and the ConfigMaps in its file, each node a task on Compose that builds its TF_CONFIG as "
            "its pod would", on_host=_manifest_on_host("TrainJob manifest"),
            commands=("up", "chaos"), refused=TRAINJOB_REFUSED),
    Setting("RUNTIME", "", _manifest("a TrainingRuntime or ClusterTrainingRuntime manifest"),
            "empty | path/to/runtime.yaml",
            "tflab up TRAINJOB=: the file holding the runtime the TrainJob names, where it is not in the "
            "TrainJob's own file", on_host=_manifest_on_host("runtime manifest"),
            commands=("up", "chaos")),
    Setting("CLAIMS", "", _claims, "empty | claim=/host/folder[:ro|:rw],...",
            "tflab up TFJOB=: a folder of this host for each PersistentVolumeClaim named, mounted where the "
            "manifest mounts the claim (ro: read-only; rw, the default: writable, kept after the run); "
            "empty: each claim a fresh folder of the run's (volumes/<claim>/)", on_host=_claims_on_host,
            commands=("up", "chaos"), tfjob=REPLAYED),
    Setting("TENSORBOARD_PORT", 6006, _integer(1024, 65535), "1024..65535",
            "make tensorboard: the port it serves on, on 127.0.0.1 only",
            commands=("tensorboard",)),
    Setting("SWARM_PLACEMENT", "spread", _choice(PLACEMENTS), " | ".join(PLACEMENTS),
            "BACKEND=swarm: spread puts task i on node i (this node first, then the others by "
            "hostname), in turn; local pins every task to this node"),
    Setting("REGISTRY", "", _registry, "empty | host:port",
            "BACKEND=swarm across nodes: the registry the lab pushes the image to and every node pulls "
            "it from, by digest (make swarm-sim starts one); empty: the image stays on this node"),
    Setting("SHARED_RUNS_DIR", 0, _integer(0, 1), "0 | 1",
            "BACKEND=swarm across nodes: 1 states that RUNS_DIR is mounted at the same path on "
            "every node (NFS, or make swarm-sim's nodes, which share this host's files)"),
    Setting("NODE_ENGINES", "", _node_engines, "empty | hostname=ssh://user@host ...",
            "BACKEND=swarm across nodes: each other node's engine as the docker CLI's -H takes it, so "
            "make chaos and the run's output reach its tasks; make swarm-sim's nodes need none"),
    Setting("NODES", 3, _integer(2, MAX_SIM_NODES), f"2..{MAX_SIM_NODES}",
            "make swarm-sim: nodes of the simulated swarm, this host's engine (the manager) and "
            "NODES-1 engines in network namespaces",
            commands=("swarm-sim",)),
    Setting("FORCE", 0, _integer(0, 1), "0 | 1",
            "make down: 1 also ends the runs whose lab is still running (outcome interrupted, \"ended by "
            "tflab down\"); 0 leaves them running and names them",
            commands=("down", "clean")),
    Setting("K8S_IMAGE", "", _image, "empty | an image reference",
            "make k8s: the trainer image the pods run; empty: the one `make images` builds here (built "
            "if need be), which `make up TFJOB=` replays; for a cluster, push it to a registry it can "
            "pull from and name it here",
            commands=("k8s",),
            tfjob=f"the TFJob's containers name their image; edit {CONTAINER_FIELD}.image"),
    Setting("K8S_NAMESPACE", "default",
            _k8s_name(K8S_NAMESPACE_PATTERN, "a DNS-1123 label: lowercase letters, digits and '-', "
                                             "a letter or digit at each end, at most 63 characters"),
            "a DNS-1123 label", "make k8s: the namespace of every object",
            commands=("k8s",),
            tfjob="the TFJob's namespace is in its tasks' addresses; edit metadata.namespace"),
    Setting("K8S_NAME", "tflab",
            _k8s_name(K8S_NAME_PATTERN, "lowercase letters, digits and '-', a letter first, a letter or digit "
                                        f"last, at most {K8S_NAME_MAX} characters (room for -worker-{MAX_TASKS - 1})"),
            f"[a-z][a-z0-9-]*, at most {K8S_NAME_MAX} characters",
            "make k8s: the TFJob's name; its tasks' Services and Jobs are <K8S_NAME>-<job>-<index>",
            commands=("k8s",),
            tfjob="the TFJob's name names its tasks' hosts; edit metadata.name"),
    Setting("K8S_RUNTIME", "cluster", _choice(K8S_RUNTIMES), " | ".join(K8S_RUNTIMES),
            "make k8s: the TrainJob's TensorFlow runtime, a ClusterTrainingRuntime (cluster) or a TrainingRuntime "
            "in K8S_NAMESPACE (namespaced, for a user who may not make cluster-wide objects)",
            commands=("k8s",)),
    Setting("K8S_PVC", "",
            _k8s_name(K8S_PVC_PATTERN, "the name of a PersistentVolumeClaim (a DNS-1123 subdomain), or nothing "
                                       "for each pod's own emptyDir"),
            "empty | a PVC name",
            "make k8s: an existing ReadWriteMany claim every task writes its outputs to, in <K8S_NAME>/; "
            "empty: each pod's own emptyDir, gone with the pod",
            commands=("k8s",),
            tfjob="the TFJob's volumes name their claims; "
                  "edit spec.tfReplicaSpecs.<type>.template.spec.volumes"),
)

SPECS: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
Settings = dataclasses.make_dataclass(
    "Settings", [(s.field, type(s.default), dataclasses.field(default=s.default)) for s in SETTINGS],
    bases=(SettingsRules,), frozen=True)
Settings.__module__ = __name__  # make_dataclass's own guess (3.12 on) is its caller's; pickle needs ours
Settings.__doc__ = "Every setting's value, checked (from_env, from_dict, replace); one field per entry of SETTINGS."


def default_of(name: str) -> object:
    return SPECS[name].default


def settings_table() -> list[tuple[str, str, str, str]]:
    """(NAME, default, allowed, meaning) for every setting, for `make help` and the README."""
    rows = []
    for name, spec in SPECS.items():
        default = default_of(name)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        shown = {"run": "timestamped id", "base_image": "(auto)"}.get(spec.field, shown)
        rows.append((name, shown, spec.allowed, spec.doc))
    return rows
