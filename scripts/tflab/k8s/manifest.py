"""Kubernetes manifests read as untrusted input: bounded YAML, the objects' own schemas, then the
rules Kubernetes' API server applies to names, keys and paths, and one way to build a host path.

A manifest may come from anyone (a pull request's, in CI), so nothing of it is used before:
- the file is at most MAX_BYTES, and its YAML expands to at most MAX_NODES nodes with at most
  MAX_ALIASES aliases and MAX_DEPTH levels (PyYAML's safe_load keeps aliases as shared references and
  bounds nothing: 441 bytes of nested aliases are billions of nodes once a walk expands them);
- it is plain JSON data (string keys, finite numbers, no NUL), as the API server would receive it;
- each object passes its schema: the TFJob training-operator v1.9's CRD openAPIV3Schema, a
  TrainJob and its runtime Trainer v2.3.0's and v2.2.1's, and v2.4.0's one rule its release note
  states (trainerreleases.py says which release refuses what), a ConfigMap and every object's
  metadata Kubernetes' own (schemas/, derived from the sources named in schemas/README.md;
  tests/unit/test_manifest.py holds them to those sources).

The schemas are checked by `Schema` below, not by the `jsonschema` package: an openAPIV3Schema uses
a dozen keywords, and the host side stays stdlib plus PyYAML (the test compares the two).
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from pathlib import Path

from tflab.core.errors import LabError
from tflab.core.grammars import DNS1123_LABEL, DNS1123_SUBDOMAIN, ENV_VAR_NAME

MAX_BYTES = 2 * 2**20  # a Kubernetes object is at most 1.5 MiB in etcd; a ConfigMap's data at most 1 MiB
MAX_NODES = 200_000  # a TFJob and its ConfigMaps are hundreds; aliases count as what they expand to
MAX_ALIASES = 64  # a manifest needs none; a few anchors for shared env blocks are fine
MAX_DEPTH = 48  # the deepest PodSpec field (affinity's match expressions) is about 20 levels down
SCHEMAS = Path(__file__).parent / "schemas"

# k8s.io/apimachinery/pkg/util/validation (its DNS-1123 grammars are core/grammars.py's)
CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# An image reference as the Docker CLI takes one; never an option (-x), never blank.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+")
INT_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
              "number": "a number", "boolean": "true or false", "null": "null"}


class ManifestError(LabError):
    """One line naming the manifest's field or value the lab cannot take."""


def shown(value, limit: int = 60) -> str:
    """A value as it may be printed: JSON with every control character escaped, cut short."""
    text = json.dumps(value, ensure_ascii=True, default=lambda v: f"<{type(v).__name__}>")
    return text if len(text) <= limit else text[:limit] + "..."


def key_text(key) -> str:
    """A mapping key as a path segment: plain where it is, else quoted and escaped."""
    return key if isinstance(key, str) and PLAIN_KEY.fullmatch(key) else f"[{shown(key)}]"


def joined(where: str, key) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    text = key_text(key)
    return f"{where}{text}" if text.startswith("[") or not where else f"{where}.{text}"


def _loader():
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader that refuses, while composing, what would expand past the bounds."""

        def __init__(self, stream):
            super().__init__(stream)
            self.nodes = self.aliases = self.depth = 0
            self.sizes: dict[int, int] = {}  # id(node) -> nodes it stands for, once composed

        def compose_document(self):
            self.sizes.clear()
            return super().compose_document()

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise ManifestError(f"has more than {MAX_ALIASES} YAML aliases (*name); a manifest needs none")
                target = self.anchors.get(event.anchor)
                if target is not None:
                    # The composer registers a node under its anchor before its children: an alias
                    # to a node not yet composed whole is inside it, a cycle no JSON can hold.
                    if id(target) not in self.sizes:
                        raise ManifestError(f"has the YAML alias *{key_text(event.anchor)} inside its own anchor "
                                            "(a cycle)")
                    self._count(self.sizes[id(target)])
                return super().compose_node(parent, index)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ManifestError(f"nests deeper than {MAX_DEPTH} levels")
            before = self.nodes
            self._count(1)
            try:
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            self.sizes[id(node)] = self.nodes - before
            return node

        def compose_mapping_node(self, anchor):
            # PyYAML keeps the last of two equal keys without a word; kubectl refuses them: a
            # reviewer would read the first, the lab would run the second. Checked as composed,
            # before a `<<` merge adds keys (which the mapping's own may override).
            node = super().compose_mapping_node(anchor)
            seen: dict[tuple[str, object], int] = {}  # (tag, value) -> its line
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = (key_node.tag, key_node.value)
                    if key in seen:
                        raise ManifestError(f"has the key {shown(key_node.value)} twice in one mapping (lines "
                                            f"{seen[key] + 1} and {key_node.start_mark.line + 1})")
                    seen[key] = key_node.start_mark.line
            return node

        def _count(self, nodes: int) -> None:
            self.nodes += nodes
            if self.nodes > MAX_NODES:
                raise ManifestError(f"has more than {MAX_NODES} YAML nodes (aliases counted as what they "
                                    "stand for)")

    return BoundedLoader, yaml


def same_file(one: Path, other: Path) -> bool:
    """Whether two paths name one file (the same device and inode once links are followed); a path
    that cannot be read is not the same, and its reader says why."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def read_documents(path: Path) -> list[dict]:
    """The file's non-empty YAML documents, each a mapping of plain JSON data; ManifestError naming
    what is wrong (without the TFJOB= prefix, which the caller adds)."""
    try:
        import yaml  # noqa: F401
    except ImportError:
        raise LabError("TFJOB needs PyYAML on the host (tflab's one dependency): pip install pyyaml") from None
    loader, yaml = _loader()
    try:
        # O_NONBLOCK: a named pipe given as the file must not hang the lab on open
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ManifestError(f"cannot be read: {error.strerror or error}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ManifestError("is not a regular file (a folder, a pipe or a device)")
        data = os.read(descriptor, MAX_BYTES + 1)
        while len(data) <= MAX_BYTES:  # a read may return less than asked before the end
            more = os.read(descriptor, MAX_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as error:
        raise ManifestError(f"cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_BYTES:
        raise ManifestError(f"is larger than {MAX_BYTES // 2**20} MiB; a manifest is a few KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError(f"is not UTF-8 text (byte {error.start})") from None
    try:
        documents = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ManifestError(f"is not YAML{at}: {problem}") from None
    except RecursionError:
        raise ManifestError(f"nests deeper than {MAX_DEPTH} levels") from None
    for number, document in enumerate(documents, 1):
        if not isinstance(document, dict):
            raise ManifestError(f"document {number} is not a Kubernetes object (a mapping)")
        plain_json(document, f"document {number}: ", 0)
    return documents


def plain_json(value, where: str, depth: int) -> None:
    """What the API server would receive: JSON, so string keys, finite numbers, and no YAML
    timestamps, binary or sets; strings without NUL (no process argument or environment holds one)."""
    if depth > MAX_DEPTH:
        raise ManifestError(f"{where or 'a document'} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ManifestError(f"{where}{key_text(key)} is a {type(key).__name__} key; JSON keys are strings "
                                    "(quote it)")
            plain_json(key, where, depth)
            plain_json(item, _child(where, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            plain_json(item, _child(where, index), depth + 1)
    elif isinstance(value, str):
        if "\0" in value:
            raise ManifestError(f"{where or 'a key'} holds a NUL character")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ManifestError(f"{where} is {value}, not a JSON number")
    elif not (value is None or isinstance(value, (bool, int))):
        raise ManifestError(f"{where} is a YAML {type(value).__name__}, not JSON data (quote it)")


def _child(where: str, key) -> str:
    if where.endswith(": "):
        return where + (f"[{key}]" if isinstance(key, int) else key_text(key))
    return joined(where, key)


@functools.cache
def schemas() -> dict:
    found = {}
    files = {"TFJob": "tfjob.json", "TrainJob": "trainjob.json", "TrainingRuntime": "trainingruntime.json"}
    for kind, name in files.items():
        with open(SCHEMAS / name) as file:
            found[kind] = json.load(file)
    found["ClusterTrainingRuntime"] = found["TrainingRuntime"]  # one schema, as schemas/README.md says
    with open(SCHEMAS / "kubernetes.json") as kubernetes:
        return {**found, **json.load(kubernetes)}


def check(document, kind: str, where: str = "") -> None:
    """ManifestError for the first place `document` breaks schema `kind` (TFJob, TrainJob,
    TrainingRuntime, ClusterTrainingRuntime, ConfigMap, ObjectMeta), named by its path and what the
    schema expects there."""
    error = Schema.first_error(schemas()[kind], document, where)
    if error:
        raise ManifestError(error)


@functools.cache
def earlier_trainer_schemas(release: str) -> dict:
    """An earlier Trainer release's TrainJob and runtime schemas (schemas/*-<release>.json: v2.2.1's;
    trainerreleases.py says which release refuses what)."""
    found = {}
    for kind in ("TrainJob", "TrainingRuntime"):
        with open(SCHEMAS / f"{kind.lower()}-{release}.json") as file:
            found[kind] = json.load(file)
    found["ClusterTrainingRuntime"] = found["TrainingRuntime"]
    return found


class Schema:
    """An openAPIV3Schema as the API server reads it, for the keywords these schemas use: type
    (a name, a list, or nullable), properties, required, additionalProperties, items, enum,
    pattern, format int32/int64, anyOf, x-kubernetes-int-or-string (an integer or a string, the
    string matching `pattern`), x-kubernetes-preserve-unknown-fields, and x-kubernetes-list-type
    map (items unique by x-kubernetes-list-map-keys), and the bounds minimum, maximum, minLength,
    maxLength, minItems, maxItems and minProperties (Trainer v2's CRDs use them). Fields the schema
    does not list are left to the caller (the lab lists them as not applied). Others (descriptions,
    defaults, CEL rules, date-time and byte formats) constrain nothing the lab reads."""

    @classmethod
    def first_error(cls, schema: dict, value, where: str) -> str | None:
        return next(cls.errors(schema, value, where), None)

    @classmethod
    def errors(cls, schema: dict, value, where: str):
        if value is None and schema.get("nullable"):
            return
        if schema.get("x-kubernetes-int-or-string"):
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                yield f"{where or '<root>'} is {shown(value)}, expected an integer or a string"
                return
            if isinstance(value, str) and "pattern" in schema and not _pattern(schema["pattern"]).search(value):
                yield f"{where} is {shown(value)}, expected a string matching {schema['pattern']}"
            return
        types = schema.get("type")
        if types is not None:
            types = [types] if isinstance(types, str) else types
            if not any(_is(value, kind) for kind in types):
                expected = " or ".join(TYPE_NAMES.get(kind, kind) for kind in types if kind != "null")
                yield f"{where or '<root>'} is {shown(value)}, expected {expected}"
                return
        if "enum" in schema and value not in schema["enum"]:
            allowed = " or ".join(shown(v) for v in schema["enum"] if v is not None)
            yield f"{where} is {shown(value)}, expected {allowed}"
            return
        if "anyOf" in schema and not any(cls.first_error(sub, value, where) is None for sub in schema["anyOf"]):
            yield cls.first_error(schema["anyOf"][0], value, where)
            return
        if isinstance(value, bool):
            return
        bound = cls.bound_error(schema, value, where)
        if bound:
            yield bound
            return
        if isinstance(value, int) and schema.get("format") in INT_RANGES:
            low, high = INT_RANGES[schema["format"]]
            if not low <= value <= high:
                yield f"{where} is {shown(value)}, expected an integer from {low} to {high} ({schema['format']})"
        elif isinstance(value, str) and "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            yield f"{where} is {shown(value)}, expected a string matching {schema['pattern']}"
        elif isinstance(value, dict):
            for name in schema.get("required", []):
                if name not in value:
                    yield f"{joined(where, name)} is missing (required)"
                    return
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                if key in properties:
                    yield from cls.errors(properties[key], item, joined(where, key))
                elif isinstance(extra, dict):
                    yield from cls.errors(extra, item, joined(where, key))
                elif extra is False:
                    yield f"{joined(where, key)} is not a field of {where or 'the object'}"
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                yield from cls.errors(schema["items"], item, f"{where}[{index}]")
            if schema.get("x-kubernetes-list-type") == "map":
                yield from cls.unique_keys(schema, value, where)

    @staticmethod
    def bound_error(schema: dict, value, where: str) -> str | None:
        if isinstance(value, (int, float)):
            if "minimum" in schema and value < schema["minimum"]:
                return f"{where} is {shown(value)}, expected at least {schema['minimum']}"
            if "maximum" in schema and value > schema["maximum"]:
                return f"{where} is {shown(value)}, expected at most {schema['maximum']}"
        sized = {str: ("minLength", "maxLength", "characters"), list: ("minItems", "maxItems", "items"),
                 dict: ("minProperties", "maxProperties", "fields")}
        for kind, (least, most, unit) in sized.items():
            if isinstance(value, kind):
                if least in schema and len(value) < schema[least]:
                    return f"{where or '<root>'} has {len(value)} {unit}, expected at least {schema[least]}"
                if most in schema and len(value) > schema[most]:
                    return f"{where or '<root>'} has {len(value)} {unit}, expected at most {schema[most]}"
        return None

    @staticmethod
    def unique_keys(schema: dict, items: list, where: str):
        keys = schema.get("x-kubernetes-list-map-keys", [])
        defaults = {key: schema["items"].get("properties", {}).get(key, {}).get("default") for key in keys}
        seen = set()
        for index, item in enumerate(items):
            key = json.dumps([item.get(k, defaults[k]) for k in keys])
            if key in seen:
                named = ", ".join(f"{k}={shown(item.get(k, defaults[k]))}" for k in keys)
                yield f"{where}[{index}] repeats {named}; each must be unique in {where}"
                return
            seen.add(key)


def _is(value, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return kind == "null" and value is None


@functools.cache
def _pattern(pattern: str) -> re.Pattern:
    # Go's RE2 `$` (no multi-line flag) is the end of the text; Python's also matches before a final \n.
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


# The API server's rules for names, keys and paths (k8s.io/apimachinery/pkg/util/validation and
# pkg/apis/core/validation); each returns the value or raises one line naming `where`.
def dns1123_label(value, where: str) -> str:
    if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
        raise ManifestError(f"{where} is {shown(value)}, expected a DNS-1123 label (at most 63 of a-z, 0-9 and "
                            "'-', starting and ending with a letter or digit)")
    return value


def dns1123_subdomain(value, where: str) -> str:
    if not isinstance(value, str) or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ManifestError(f"{where} is {shown(value)}, expected a DNS-1123 subdomain (at most 253 of a-z, 0-9, "
                            "'-' and '.', each part starting and ending with a letter or digit)")
    return value


def config_map_key(value, where: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not CONFIG_MAP_KEY.fullmatch(value) \
            or value == "." or value.startswith(".."):
        raise ManifestError(f"{where} is {shown(value)}, expected a ConfigMap key (at most 253 of a-z, A-Z, 0-9, "
                            "'-', '_' and '.', not '.' nor starting with '..')")
    return value


def env_name(value, where: str) -> str:
    if not isinstance(value, str) or not ENV_VAR_NAME.fullmatch(value):
        raise ManifestError(f"{where} is {shown(value)}, expected an environment variable name ([-._a-zA-Z]"
                            "[-._a-zA-Z0-9]*, no '=')")
    return value


def image_reference(value, where: str) -> str:
    if not isinstance(value, str) or len(value) > 4096 or not IMAGE.fullmatch(value):
        raise ManifestError(f"{where} is {shown(value)}, expected an image reference such as "
                            "registry.example/team/trainer:1 (no blank, not starting with '-')")
    return value


def relative_path(value, where: str) -> str:
    """A path below a volume's root (a ConfigMap item's path): relative, no '..' part, and not
    starting with '..' (the kubelet keeps its own ..data there)."""
    if not isinstance(value, str) or not value or value.startswith(("/", "..")) or len(value) > 4096 \
            or any(part in ("", ".", "..") for part in value.split("/")) or "\\" in value:
        raise ManifestError(f"{where} is {shown(value)}, expected a relative path of plain names (no '..', "
                            "'.' or empty parts, not starting with '/' or '..')")
    return value


def absolute_path(value, where: str) -> str:
    """A path in the container (mountPath, workingDir): absolute, normalised to compare."""
    if not isinstance(value, str) or not value.startswith("/") or ":" in value or "," in value \
            or len(value) > 4096 or not value.isprintable():
        raise ManifestError(f"{where} is {shown(value)}, expected an absolute path in the container (starting "
                            "with '/', without ':' or ',')")
    return os.path.normpath(value)


def path_under(root: Path, relative: str) -> Path:
    """root/relative, the one way the lab turns a manifest's names into a host path: each part a
    plain name (relative_path's rules), parent folders made one by one and never a link, and the
    result resolving inside root. Whatever a new volume kind's names are, what this returns lies
    under root, or it is refused."""
    relative_path(relative, f"a path under {root.name}/")
    base = os.path.realpath(root)
    if not os.path.isdir(base):
        raise ManifestError(f"{root} is not a folder")
    parts = relative.split("/")
    folder = base
    for part in parts[:-1]:
        folder = os.path.join(folder, part)
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass
        except OSError as error:
            raise ManifestError(f"cannot make {root.name}/{relative}: {error.strerror or error}") from None
        if os.path.islink(folder) or not os.path.isdir(folder):
            raise ManifestError(f"{root.name}/{relative}: {os.path.relpath(folder, base)} is a link or a file, "
                                "not a folder of the run's")
    path = os.path.join(folder, parts[-1])
    resolved = os.path.realpath(path)
    if os.path.islink(path) or os.path.commonpath([resolved, base]) != base or resolved == base:
        raise ManifestError(f"{root.name}/{relative} resolves to {resolved}, outside {root}")
    return Path(path)
