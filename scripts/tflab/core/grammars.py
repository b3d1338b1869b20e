"""What a setting's text may be: each value's grammar (a parser from text to value that refuses
anything else in one line, SettingsError), with the patterns and limits those grammars hold.

core/settings.py names one of these for every setting it declares; the parsers are the same on
the host and in the trainer (config.json is read back through them), so this module, like every
one in core/, imports neither TensorFlow nor any Docker code. What only the host can check (a file
exists, a folder is readable) is core/hostfiles.py's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable, Mapping

from tflab.core import limits, task, versions
from tflab.core.errors import LabError


class SettingsError(LabError, ValueError):
    """A setting the lab refuses; str() is the one line a user sees."""


LINK_PATTERN = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)ms,([0-9]{1,9}(?:\.[0-9]{1,9})?)mbit")
# A cluster's job sizes (WORKERS, PS, a COMPARE entry's N) go as far as the API's own replica
# count, int32 (core/limits.py): what bounds them are the real limits, checked with each limit's
# source where it applies (TF_CONFIG's size for every command, cluster.check_tf_config; Kubernetes'
# names for make k8s; the engine's memory for a run, backends.check_memory), not a number of the lab's.
MAX_WORKERS = limits.INT32_MAX
# REPLICAS: MirroredStrategy's logical CPUs, all in one process.
MAX_REPLICAS = 32
# A replay plans every replica of its manifest (each a Compose service with its own TF_CONFIG) and
# starts them all: still bounded here, until a replica can be rehearsed alone (issue 51).
REPLAY_TASKS_MOST = 32
RUN_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
RESERVED_RUNS = ("latest",)  # RUNS_DIR/latest is the link to the newest run
# Kubernetes names (make k8s). A Service name must be a DNS-1035 label (a letter first, 63 at most)
# and the tasks' Services are <K8S_NAME>-<job>-<index>: the name leaves room for -worker-31; a larger
# cluster's longest Service name is checked against the rule itself (k8s/writer.py).
K8S_NAME_MAX = 63 - len("-worker-31")
K8S_NAME_PATTERN = re.compile(rf"[a-z](?:[a-z0-9-]{{0,{K8S_NAME_MAX - 2}}}[a-z0-9])?")
# The API server's two DNS-1123 grammars (k8s.io/apimachinery/pkg/util/validation), for the settings
# and for the manifests a replay reads: IsDNS1123Label (a namespace, a volume, a host name: at most
# 63) and IsDNS1123Subdomain (most objects' names, a claim's: at most 253, its parts unbounded).
DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
COMPARE_ENTRY = re.compile(r"(single)|(mirrored|multiworker|parameter-server)-([0-9]{1,6})")
# Docker's smallest memory limit (the engine refuses less: "Minimum memory limit allowed is 6MB")
# and smallest CPU limit ("Range of CPUs is from 0.01 to ..."); below a millicore Kubernetes would
# get cpu: "0m" too.
MIN_MEMORY_BYTES = 6 * 1024 * 1024
MIN_CPUS = 0.01
MIN_MEMORY = f"{MIN_MEMORY_BYTES // 1024**2}m"  # as MEMORY writes it
MEMORY_FACTORS = {"k": 1024, "m": 1024**2, "g": 1024**3}
# An image reference as Docker's distribution/reference grammar has it: [domain[:port]/]path[:tag][@digest].
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = re.compile(
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


# Every pattern here spells its digits [0-9]: Python's \d and str.isdigit also take other
# scripts' digits (٣, ²), which int() may refuse or Docker and Kubernetes would.
# integer, number and choice are callables that also say what they take (range, choices), for the
# property test (tests/unit/test_settings_property.py).
@dataclass(frozen=True)
class Integer:
    low: int
    high: int

    @property
    def range(self) -> tuple[int, int]:
        return self.low, self.high

    def __call__(self, name: str, raw: str) -> int:
        low, high = self.low, self.high
        if not re.fullmatch(r"[+-]?[0-9]{1,20}", raw) or not low <= int(raw) <= high:
            raise SettingsError(f"{name}={raw} is not allowed: expected an integer from {low} to {high}")
        return int(raw)


def integer(low: int, high: int) -> Integer:
    return Integer(low, high)


DECIMAL = re.compile(r"[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12}")


@dataclass(frozen=True)
class Number:
    """A decimal number from low to high (or exactly 0, where `zero` says what it means)."""
    low: float
    high: float
    what: str = "seconds"
    zero: str = ""

    @property
    def range(self) -> tuple[float, float]:
        return self.low, self.high

    def __call__(self, name: str, raw: str) -> float:
        low, high, zero = self.low, self.high, self.zero
        value = float(raw) if DECIMAL.fullmatch(raw) else float("nan")
        if not (low <= value <= high or (zero and value == 0)):  # also false for nan
            expected = f"{self.what} from {low:g} to {high:g}" + (f", or 0 ({zero})" if zero else "")
            raise SettingsError(f"{name}={raw} is not allowed: expected {expected}")
        return value


def number(low: float, high: float, what: str = "seconds", zero: str = "") -> Number:
    return Number(low, high, what, zero)


@dataclass(frozen=True)
class Choice:
    choices: tuple[str, ...]

    def __call__(self, name: str, raw: str) -> str:
        if raw not in self.choices:
            raise SettingsError(f"{name}={raw} is not allowed: expected one of {', '.join(self.choices)}")
        return raw


def choice(choices: tuple[str, ...]) -> Choice:
    return Choice(choices)


def run_id(name: str, raw: str) -> str:
    if raw in RESERVED_RUNS:
        raise SettingsError(f"{name}={raw} is not allowed: {raw} is the lab's link to the newest run; "
                            "expected another name (leave RUN empty for the newest, or for a fresh id)")
    if not RUN_ID_PATTERN.fullmatch(raw):
        raise SettingsError(
            f"{name}={raw} is not allowed: expected lowercase letters, digits and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return raw


def compare(name: str, raw: str) -> str:
    entries = raw.split()
    bad = [entry for entry in entries if not COMPARE_ENTRY.fullmatch(entry)]
    if bad or not entries or len(set(entries)) != len(entries):
        what = f"entry {bad[0]}" if bad else "a repeated entry" if entries else "nothing"
        raise SettingsError(f"{name}={raw!r} is not allowed ({what}): expected distinct entries such as "
                            "single mirrored-2 multiworker-4 parameter-server-2")
    for match in filter(None, map(COMPARE_ENTRY.fullmatch, entries)):  # every entry, matched above
        entry, count = match.group(0), match.group(3)
        most = MAX_REPLICAS if entry.startswith("mirrored") else MAX_WORKERS
        if count is not None and not 1 <= int(count) <= most:
            raise SettingsError(f"{name}={raw!r} is not allowed (entry {entry}): expected a count from 1 to "
                                f"{most}, such as {entry.rsplit('-', 1)[0]}-2")
    return " ".join(entries)


def backup(name: str, raw: str) -> str:
    if raw in ("epoch", "off") or (re.fullmatch(r"[0-9]{1,9}", raw) and int(raw) > 0):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch, off, or a number of steps from 1 to 999999999")


def stall(name: str, raw: str) -> str:
    """STALL: auto, off, or a fixed limit in whole seconds (supervisor/stall.py)."""
    if raw in ("auto", "off") or (re.fullmatch(r"[0-9]{1,5}", raw) and 5 <= int(raw) <= 86_400):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected auto, off, or a number of seconds from 5 to 86400")


def memory(name: str, raw: str) -> str:
    match = re.fullmatch(r"([0-9]{1,12})([kmg])", raw)
    if raw == "0" or (match and int(match.group(1)) * MEMORY_FACTORS[match.group(2)] >= MIN_MEMORY_BYTES):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected 0 (no limit) or a size of at least {MIN_MEMORY} "
                        "(Docker's minimum), such as 512m or 2g")


def link(name: str, raw: str) -> str:
    match = LINK_PATTERN.fullmatch(raw)
    if match and float(match.group(2)) > 0:
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected <latency>ms,<rate>mbit such as 1ms,1000mbit")


def moment(name: str, raw: str) -> str:
    """AT (core/moment.py): what a run cannot reach is make chaos's to refuse (faults/chaos.py)."""
    kind, colon, value = raw.partition(":")
    if (kind == "epoch" and re.fullmatch(r"[0-9]{1,5}", value)) or (
            kind == "step" and re.fullmatch(r"[1-9][0-9]{0,8}", value)) or (
            kind == "seconds" and re.fullmatch(r"[0-9]{1,6}(?:\.[0-9]{1,6})?", value)) or (
            kind in ("save", "eval") and (not colon or re.fullmatch(r"[1-9][0-9]{0,5}", value))) or raw == "restore":
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch:N (after N epochs), step:N (at the Nth "
                        "training step, N from 1 to 999999999), seconds:S, save[:N] (while the Nth checkpoint is "
                        "written, N from 1 to 999999), restore (while a restarted target restores its backup) or "
                        "eval[:N] (while the evaluator reads its Nth checkpoint)")


def heal(name: str, raw: str) -> str:
    if raw == "never" or re.fullmatch(r"[0-9]{1,6}(?:\.[0-9]{1,6})?", raw):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected seconds, or never")


def gpus(name: str, raw: str) -> str:
    indexes = raw.split(",")
    if raw == "all" or (all(re.fullmatch(r"[0-9]{1,4}", index) for index in indexes)
                        and len({int(index) for index in indexes}) == len(indexes)):
        return raw if raw == "all" else ",".join(str(int(index)) for index in indexes)
    raise SettingsError(f"{name}={raw} is not allowed: expected all, or distinct GPU indexes such as 0,1 "
                        "(empty: CPUs only)")


def k8s_name(pattern: re.Pattern, what: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if not pattern.fullmatch(raw):
            raise SettingsError(f"{name}={raw} is not allowed: expected {what}")
        return raw

    return parse


def printable(name: str, raw: str) -> str:
    if not raw.isprintable():
        raise SettingsError(f"{name}={raw!r} is not allowed: expected printable characters only")
    return raw


def text(name: str, raw: str) -> str:
    if any(c.isspace() for c in raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a value without spaces")
    return printable(name, raw)


def folder(name: str, raw: str) -> str:
    printable(name, raw)
    if ":" in raw:
        raise SettingsError(f"{name}={raw} is not allowed: expected a path without ':' (Docker's volume syntax "
                            "splits at ':', so the folder could not be mounted)")
    return raw


def image(name: str, raw: str) -> str:
    if len(raw) > 512 or not IMAGE_PATTERN.fullmatch(raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected an image reference such as "
                            "python:3.11-slim or registry.example.com:5000/team/tflab-trainer:1.0 (lowercase "
                            "name, optional :tag and @digest, never starting with '-')")
    return raw


REGISTRY_PATTERN = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?")


def registry(name: str, raw: str) -> str:
    port = raw.rsplit(":", 1)[1] if ":" in raw else "1"
    if len(raw) > 255 or not REGISTRY_PATTERN.fullmatch(raw) or not 0 < int(port) < 65536:
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a registry's host:port, such as "
                            "198.18.213.1:5000 or registry.example.com:5000 (no scheme, no path)")
    return raw


NODE_ENGINE_PATTERN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,62})=((?:ssh|tcp|unix)://[^\s=]+)")


def node_engines(name: str, raw: str) -> str:
    entries = raw.split()
    bad = [entry for entry in entries if not NODE_ENGINE_PATTERN.fullmatch(entry)]
    hosts = [entry.split("=", 1)[0] for entry in entries]
    if bad or not entries or len(set(hosts)) != len(hosts):
        what = f"entry {bad[0]}" if bad else "a node named twice"
        raise SettingsError(f"{name}={raw!r} is not allowed ({what}): expected hostname=engine entries, such as "
                            "node-2=ssh://admin@node-2 node-3=tcp://10.0.0.3:2376 (the docker CLI's -H)")
    return " ".join(entries)


def script(name: str, raw: str) -> str:
    printable(name, raw)
    if not raw.endswith(".py") or ":" in raw:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing Python file (*.py), "
                            "without ':' (Docker's volume syntax splits at ':')")
    return raw


def tfjob(name: str, raw: str) -> str:
    printable(name, raw)
    if not raw.endswith((".yaml", ".yml", ".json")):
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of a TFJob manifest (*.yaml, *.yml "
                            "or *.json)")
    return raw


def manifest(what: str) -> Callable[[str, str], str]:
    """TRAINJOB and RUNTIME: a manifest's path, as TFJOB's."""
    def parse(name: str, raw: str) -> str:
        printable(name, raw)
        if raw and not raw.endswith((".yaml", ".yml", ".json")):
            raise SettingsError(f"{name}={raw} is not allowed: expected the path of {what} (*.yaml, *.yml or *.json)")
        return raw

    return parse


def args(name: str, raw: str) -> str:
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
    return [(name, value) for name, value in (entry.split("=", 1) for entry in shlex.split(raw))]


def script_env_hint(name: str, given: Mapping[str, str]) -> str:
    """For `make up SCRIPT=train.py KERAS_HOME=/x`: an environment variable meant for the script."""
    if not given.get("SCRIPT") or not ENV_VAR_NAME.fullmatch(name):
        return ""
    return f"; for the script's environment: SCRIPT_ENV=\"{name}=...\""


def script_env(name: str, raw: str) -> str:
    args(name, raw)
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


# CLAIMS: a TFJob replay's claims given folders of the host, as a cluster's PersistentVolume holds
# data before a job starts and keeps what it wrote. Only from the command line: a manifest names its
# claims, never a host path (a hostPath volume is refused), so what a replica may touch on this host
# is what its user typed.
CLAIM_ENTRY = re.compile(r"([^=,]*)=([^,]*?)(?::(ro|rw))?")


def claim_folders(raw: str) -> dict[str, tuple[str, bool]]:
    """CLAIMS's entries: claim name -> (its folder, read-only). Checked by _claims already."""
    found = {}
    for match in filter(None, map(CLAIM_ENTRY.fullmatch, filter(None, raw.split(",")))):
        name, folder, mode = match.groups()
        found[name] = (folder, mode == "ro")
    return found


def claims(name: str, raw: str) -> str:
    text(name, raw)
    expected = ("expected claim=/host/folder[:ro|:rw] entries, comma-separated, such as "
                "data=/srv/mnist:ro,out=runs/out:rw (:rw, writable, where no mode is given)")
    seen = set()
    for entry in raw.split(","):
        match = CLAIM_ENTRY.fullmatch(entry)
        if not match or not match.group(2) or ":" in match.group(2):
            raise SettingsError(f"{name}={raw} is not allowed: {entry!r} is not claim=folder; {expected}")
        if not DNS1123_SUBDOMAIN.fullmatch(match.group(1)):
            raise SettingsError(f"{name}={raw} is not allowed: {match.group(1)!r} is not a claim's name (a DNS-1123 "
                                f"subdomain: lowercase letters, digits, '-' and '.'); {expected}")
        if match.group(1) in seen:
            raise SettingsError(f"{name}={raw} is not allowed: the claim {match.group(1)} is given twice; give it once")
        seen.add(match.group(1))
    return raw


# TF, KERAS and STRATEGIES (versions.py holds the table of versions): one value for a run, a list
# for make matrix (images.trainer_variant refuses a list to a single run).
MATRIX_STRATEGIES = ("single", "mirrored", "multiworker")
# PRECISION: Keras's dtype policies; PRECISIONS, a list of them for make matrix and make compare.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


def _words(name: str, raw: str, parse_one: Callable[[str], str | None], allowed: str) -> str:
    found: list[str] = []
    for word in raw.split():
        value = parse_one(word)
        if value is None:
            raise SettingsError(f"{name}={raw} is not allowed: {word} is not one of {allowed}")
        if value not in found:
            found.append(value)
    return " ".join(found)


def tf(name: str, raw: str) -> str:
    return _words(name, raw, versions.canonical,
                  f"the TensorFlow versions with Python 3.11 wheels: {versions.ALLOWED} (a list for make matrix)")


def keras(name: str, raw: str) -> str:
    return _words(name, raw, versions.keras_canonical, versions.KERAS_ALLOWED + " (a list for make matrix)")


def choices(names: tuple[str, ...]) -> Callable[[str, str], str]:
    """One or more of `names`, space-separated (make chaos-grid's SCENARIOS)."""
    def parse(name: str, raw: str) -> str:
        return _words(name, raw, lambda word: word if word in names else None, " | ".join(names) + ", one or more")

    return parse


def moments(name: str, raw: str) -> str:
    def one(word: str) -> str | None:
        try:
            return moment(name, word)
        except SettingsError:
            return None

    return _words(name, raw, one, "AT's values (epoch:N, step:N, seconds:S, save[:N], restore, eval[:N]), one or more")


def strategies(name: str, raw: str) -> str:
    return _words(name, raw, lambda word: word if word in MATRIX_STRATEGIES else None,
                  " | ".join(MATRIX_STRATEGIES) + ", one or more")


def precisions(name: str, raw: str) -> str:
    return _words(name, raw, lambda word: word if word in PRECISIONS else None,
                  " | ".join(PRECISIONS) + ", one or more")
