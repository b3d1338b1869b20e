"""Generated manifests: TFJob parts drawn from the CRD's own schema (hypothesis-jsonschema), then
mutated (wrong types at random places, hostile strings and names, huge numbers, deep nesting,
aliases). Each must end in a plan or a one-line ManifestError/LabError, never another exception,
and a plan's volumes and compose file must land inside its run folder, nothing outside it.

The outcomes are counted and printed (`pytest -s`) so that a change in what is refused shows."""

import collections
import json
import os
import tempfile
import time
import types
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import utils as conjecture_utils
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.k8s import manifest, tfjob
from tflab.replay.stack import render
from tflab.replay.volumes import write_volumes


class _Many:
    """hypothesis-jsonschema 0.23.1 (its newest) draws objects' keys with Hypothesis' private
    `many(...).more()`, which Hypothesis 6.1xx replaced by a context manager and an iterator: the
    old calls on the new object, for its one use in `from_object_schema`."""

    def __init__(self, data, **sizes):
        self.many = conjecture_utils.many(data, **sizes)
        self.many.__enter__()
        self.elements = iter(self.many)

    def more(self) -> bool:
        try:
            next(self.elements)
            return True
        except StopIteration:
            self.many.__exit__(None, None, None)
            return False

    def reject(self, why=None) -> None:
        self.many.reject(why)


import hypothesis_jsonschema._from_schema as _from_schema  # noqa: E402

_from_schema.cu = types.SimpleNamespace(many=_Many)
from hypothesis_jsonschema import from_schema  # noqa: E402

SCHEMA = manifest.schemas()["TFJob"]
REPLICA = SCHEMA["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
POD = REPLICA["properties"]["template"]["properties"]["spec"]
CONTAINER = POD["properties"]["containers"]["items"]
VOLUME = POD["properties"]["volumes"]["items"]
RUN_POLICY = SCHEMA["properties"]["spec"]["properties"]["runPolicy"]
SECURITY = CONTAINER["properties"]["securityContext"]
OUTCOMES: collections.Counter = collections.Counter()
OUTSIDE = "OUTSIDE"  # placeholder in hostile strings: the sandbox's folder that must stay empty

HOSTILE_STRINGS = ["../evil", "../../../../evil", f"{OUTSIDE}/evil", "/etc/passwd", "a/../../evil", "..", ".", "",
                   " ", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "x" * 300, "-rm", "A=B", "a:b", "/", "/a/../..",
                   "C:\\evil", "tensorflow", "conf", "configmaps", "..data", "é", "a\nb"]
WRONG_TYPES = [0, -1, 2**31, 10**30, -(10**30), 1.5, True, None, [], {}, ["x"], {"a": "b"}, "7"]
SANE_NAMES = ["conf", "out", "tmp", "settings", "outputs", "a-b", "x1"]


def deep(level: int):
    value = "leaf"
    for _ in range(level):
        value = [value] if level % 2 else {"k": value}
    return value


hostile = st.one_of(st.sampled_from(HOSTILE_STRINGS), st.sampled_from(WRONG_TYPES),
                    st.integers(min_value=5, max_value=120).map(deep), st.text(max_size=20))
names = st.one_of(st.sampled_from(SANE_NAMES), st.sampled_from(HOSTILE_STRINGS))


def base_job() -> list[dict]:
    return [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"},
         "spec": {"runPolicy": {"backoffLimit": 1}, "tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
             "containers": [{"name": "tensorflow", "image": "mine:1",
                             "volumeMounts": [{"name": "conf", "mountPath": "/conf"},
                                              {"name": "out", "mountPath": "/out"}]}],
             "volumes": [{"name": "conf", "configMap": {"name": "settings"}},
                         {"name": "out", "persistentVolumeClaim": {"claimName": "outputs"}}]}}}}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"config.json": "{}"}},
    ]


def paths_of(value, prefix=()):
    """Every place in a document, as key/index paths."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*prefix, index))


def set_at(document, path, value):
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


@st.composite
def documents(draw) -> list[dict]:
    docs = base_job()
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        edit = draw(st.sampled_from(["container", "volume", "mount", "run_policy", "security", "key", "name",
                                     "anywhere", "replica_type", "items"]))
        try:
            edit_one(draw, edit, docs)
        except (TypeError, AttributeError, KeyError, IndexError):
            pass  # an earlier edit put a wrong type where this one reaches in: the document keeps it
    return docs


def edit_one(draw, edit: str, docs: list[dict]) -> None:
    job, config_map = docs
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    if edit == "container":  # the tensorflow container drawn from the CRD's own schema
        container = draw(from_schema(CONTAINER))
        container["name"] = "tensorflow"
        if draw(st.booleans()):
            container["image"] = "mine:1"
        pod["containers"] = [container]
    elif edit == "volume":
        volume = draw(from_schema(VOLUME))
        volume["name"] = draw(names)
        pod.setdefault("volumes", []).append(volume)
    elif edit == "mount":
        pod["containers"][0].setdefault("volumeMounts", []).append(
            {"name": draw(names), "mountPath": draw(st.one_of(st.sampled_from(["/a", "/conf", "/out/x"]),
                                                              st.sampled_from(HOSTILE_STRINGS)))})
    elif edit == "run_policy":
        job["spec"]["runPolicy"] = draw(from_schema(RUN_POLICY))
    elif edit == "security":
        pod["containers"][0]["securityContext"] = draw(from_schema(SECURITY))
    elif edit == "key":
        config_map.setdefault("data", {})[draw(st.one_of(names, st.text(max_size=12)))] = draw(st.text(max_size=8))
    elif edit == "name":
        target = draw(st.sampled_from([config_map["metadata"], job["metadata"]]))
        target["name"] = draw(names)
    elif edit == "items":
        volume = {"name": draw(names), "configMap": {"name": "settings", "items": [
            {"key": draw(st.sampled_from(["config.json", "nope"])), "path": draw(names)}]}}
        pod.setdefault("volumes", []).append(volume)
        pod["containers"][0].setdefault("volumeMounts", []).append({"name": volume["name"], "mountPath": "/items"})
    elif edit == "replica_type":
        job["spec"]["tfReplicaSpecs"][draw(st.sampled_from(["Chief", "PS", "Evaluator", "Master", "Bogus"]))] = \
            json.loads(json.dumps(job["spec"]["tfReplicaSpecs"]["Worker"]))
    else:  # a wrong type or hostile value at any place of either object
        document = draw(st.sampled_from(docs))
        places = [p for p in paths_of(document) if p]
        set_at(document, draw(st.sampled_from(places)), draw(hostile))


def sandboxed(value, sandbox: Path):
    """The hostile strings' OUTSIDE placeholder made a real folder of the sandbox."""
    if isinstance(value, str):
        return value.replace(OUTSIDE, str(sandbox / "outside"))
    if isinstance(value, dict):
        return {sandboxed(k, sandbox): sandboxed(v, sandbox) for k, v in value.items()}
    if isinstance(value, list):
        return [sandboxed(v, sandbox) for v in value]
    return value


def everything_under(folder: Path) -> set[str]:
    return {os.path.join(root, name) for root, folders, files in os.walk(folder) for name in folders + files}


def replay_offline(text: str, sandbox: Path, number: int) -> str:
    """load, then write_volumes and render into a fresh run folder; the outcome's name."""
    path = sandbox / f"tfjob-{number}.yaml"
    path.write_text(text)
    run_dir = sandbox / "runs" / f"r{number}"
    before = everything_under(sandbox)
    try:
        plan = tfjob.load(Settings(tfjob=str(path)))
    except LabError as error:
        message = str(error)
        assert "\n" not in message and "\x1b" not in message and "\x07" not in message, message
        assert message.startswith(f"TFJOB={path}"), message
        outcome = "refused"
    else:
        run_dir.mkdir(parents=True)
        try:
            write_volumes(plan, run_dir)
            json.dumps(render(plan, run_dir))
            outcome = "planned"
        except LabError as error:  # a path refused at write time (a link, a clash)
            assert "\n" not in str(error)
            outcome = "refused at write"
    new = everything_under(sandbox) - before
    strays = [p for p in new if not (p == str(run_dir) or p.startswith(f"{run_dir}/") or p == str(path)
                                    or p == str(run_dir.parent))]
    assert strays == [], strays
    assert not (sandbox / "outside").exists() or not os.listdir(sandbox / "outside")
    for written in everything_under(run_dir):
        assert os.path.realpath(written).startswith(os.path.realpath(run_dir) + "/"), written
    return outcome


def test_generated_and_mutated_tfjobs_end_in_a_plan_or_one_line():
    counts = collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        sandbox = Path(folder)
        (sandbox / "outside").mkdir()

        @settings(max_examples=240, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
        @given(documents())
        def run(docs):
            text = yaml.safe_dump_all(sandboxed(docs, sandbox), sort_keys=False)
            try:
                counts[replay_offline(text, sandbox, sum(counts.values()))] += 1
            except (AssertionError, LabError):
                raise
            except Exception:
                counts["traceback"] += 1
                raise

        run()
    OUTCOMES.update({f"tfjob {k}": v for k, v in counts.items()})
    print(f"\ngenerated TFJob manifests: {dict(counts)}")
    assert counts["traceback"] == 0
    assert counts["planned"] >= 10 and counts["refused"] >= 10, counts  # the generator reaches both ends


@st.composite
def alias_texts(draw) -> str:
    """YAML whose size lies in its aliases (a bomb of `levels` x `width`), or in its nesting."""
    kind = draw(st.sampled_from(["bomb", "merge", "deep-flow", "deep-block", "cycle"]))
    if kind in ("bomb", "merge"):
        levels, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        lines = [f"l0: &l0 [{','.join(['lol'] * width)}]"]
        for level in range(1, levels):
            if kind == "bomb":
                lines.append(f"l{level}: &l{level} [{','.join([f'*l{level - 1}'] * width)}]")
            else:
                lines.append(f"l{level}: &l{level} {{<<: {{a: *l{level - 1}}}, b: *l{level - 1}}}")
        return "\n".join(lines) + "\n"
    if kind == "cycle":
        return "a: &a {b: *a}\n"
    depth = draw(st.integers(1, 3000))
    if kind == "deep-flow":
        return "a: " + "[" * depth + "]" * depth + "\n"
    return "".join(" " * (2 * i) + f"k{i}:\n" for i in range(min(depth, 400))) + " " * 800 + "x\n"


def test_aliases_and_nesting_end_quickly_in_a_load_or_one_line():
    counts = collections.Counter()
    slowest = [0.0]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tfjob.yaml"

        @settings(max_examples=150, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(alias_texts())
        def run(text):
            path.write_text(text)
            started = time.monotonic()
            try:
                tfjob.load(Settings(tfjob=str(path)))
                counts["planned"] += 1
            except LabError as error:
                assert "\n" not in str(error) and str(error).startswith(f"TFJOB={path}")
                counts["refused"] += 1
            except Exception:
                counts["traceback"] += 1
                raise
            slowest[0] = max(slowest[0], time.monotonic() - started)
            assert time.monotonic() - started < 5.0  # a hang, not a speed: 0.2 s alone (the bomb test holds 0.5)

        run()
    OUTCOMES.update({f"yaml {k}": v for k, v in counts.items()})
    print(f"\ngenerated alias/nesting YAML: {dict(counts)}, slowest {slowest[0]:.3f} s")
    assert counts["traceback"] == 0 and counts["refused"] > 0


def _int_format(bits: int):
    return lambda value: not isinstance(value, int) or isinstance(value, bool) or \
        -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("int32")(_int_format(32))
FORMATS.checks("int64")(_int_format(64))


def _list_type(validator, kind, items, schema):
    if kind != "map" or not validator.is_type(items, "array"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    defaults = {k: schema["items"].get("properties", {}).get(k, {}).get("default") for k in keys}
    seen = set()
    for item in items:
        if isinstance(item, dict):
            key = json.dumps([item.get(k, defaults[k]) for k in keys])
            if key in seen:
                yield jsonschema.ValidationError(f"duplicate {key}")
            seen.add(key)


OpenAPI = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type})


@pytest.mark.parametrize("part", ["container", "volume", "runPolicy"])
def test_the_lab_schema_check_agrees_with_jsonschema(part):
    """manifest.Schema is the host's own reading of an openAPIV3Schema; jsonschema (with the
    int32/int64 formats and x-kubernetes-list-type map asserted, as the API server does) must
    find the same documents valid."""
    schema = {"container": CONTAINER, "volume": VOLUME, "runPolicy": RUN_POLICY}[part]
    reference = OpenAPI(schema, format_checker=FORMATS)
    counts = collections.Counter()

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(from_schema(schema), st.data())
    def run(value, data):
        if data.draw(st.booleans()):
            places = [p for p in paths_of(value) if p]
            if places:
                set_at(value, data.draw(st.sampled_from(places)), data.draw(hostile))
        ours = manifest.Schema.first_error(schema, value, "")
        theirs = next(iter(reference.iter_errors(value)), None)
        assert (ours is None) == (theirs is None), (ours, theirs and theirs.message, value)
        counts["valid" if ours is None else "invalid"] += 1

    run()
    OUTCOMES.update({f"schema {part} {k}": v for k, v in counts.items()})
    print(f"\nschema agreement on {part}: {dict(counts)}")
    assert counts["valid"] and counts["invalid"]
