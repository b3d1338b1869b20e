"""A TFJob manifest is untrusted input: bounded YAML, every object against its schema, the API
server's rules for names, keys and paths, and nothing written outside the run folder. The hostile
examples of issue 27 one by one; tests/unit/test_manifest_property.py generates the rest."""

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from kubernetes_validate.utils import schema_contents
from labtest.fakes import FakeEngine, answered
from tflab import replay
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.k8s import manifest, tfjob, trainerreleases
from tflab.replay import stack
from tflab.replay.images import check_images, check_non_root
from tflab.replay.stack import FoldedOutput, render
from tflab.replay.volumes import volume_path, write_volumes

SCHEMAS = Path(__file__).parent / "schemas"
KUBERNETES_OBJECTS = {"ConfigMap": "io.k8s.api.core.v1.ConfigMap",
                      "ObjectMeta": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
KUBERNETES_VERSION = "1.37.0"  # kubernetes-validate's newest, requirements/test.txt


def without_descriptions(schema):
    if isinstance(schema, list):
        return [without_descriptions(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kept = ("default", "enum", "x-kubernetes-list-map-keys")  # values, not schemas: a field may be named description
    return {key: ({name: without_descriptions(sub) for name, sub in value.items()} if key == "properties"
                  else value if key in kept else without_descriptions(value))
            for key, value in schema.items() if key != "description"}


def inlined(schema, definitions):
    if isinstance(schema, list):
        return [inlined(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return inlined(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    return {key: inlined(value, definitions) for key, value in schema.items()}


def derived_schemas() -> dict[str, str]:
    """tflab/k8s/schemas/'s files as derived from their sources (schemas/README.md there)."""
    crd = yaml.load((SCHEMAS / "kubeflow.org_tfjobs.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader",
                                                                                        yaml.SafeLoader))
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    definitions = schema_contents(f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local/_definitions.json",
                                  KUBERNETES_VERSION)["$defs"]
    kubernetes = {kind: without_descriptions(inlined(definitions[name], definitions))
                  for kind, name in KUBERNETES_OBJECTS.items()}
    dump = lambda value: json.dumps(value, separators=(",", ":"), sort_keys=True) + "\n"  # noqa: E731
    return {"tfjob.json": dump(without_descriptions(v1["schema"]["openAPIV3Schema"])),
            "kubernetes.json": dump(kubernetes),
            **{f"{kind.lower()}.json": dump(schema) for kind, schema in trainer_schemas().items()},
            **{f"{kind.lower()}-{EARLIER_TRAINER}.json": dump(schema)
               for kind, schema in trainer_schemas(SCHEMAS / f"trainer-{EARLIER_TRAINER}").items()}}


TRAINER_CRDS = {"TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
                "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
                "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml"}


EARLIER_TRAINER = trainerreleases.TRAINER_RELEASES[-1]  # v2.2.1, whose CRDs are in SCHEMAS / trainer-v2.2.1


def trainer_schemas(folder: Path = SCHEMAS) -> dict[str, dict]:
    """Trainer v2.3.0's (or the release's in `folder`) v1alpha1 openAPIV3Schemas, descriptions left
    out. The two runtimes' are one schema (a ClusterTrainingRuntime is a TrainingRuntime without a
    namespace): shipped once."""
    schemas = {}
    for kind, name in TRAINER_CRDS.items():
        crd = yaml.load((folder / name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        assert crd["spec"]["names"]["kind"] == kind
        (v1alpha1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1alpha1"]
        schemas[kind] = without_descriptions(v1alpha1["schema"]["openAPIV3Schema"])
    assert schemas.pop("ClusterTrainingRuntime") == schemas["TrainingRuntime"]
    return schemas


def test_the_shipped_schemas_are_the_crds_and_kubernetes_own():
    for name, text in derived_schemas().items():
        assert (manifest.SCHEMAS / name).read_text() == text, f"{name}: write it again with derived_schemas()"
    assert (manifest.SCHEMAS / "LICENSE.training-operator").read_bytes() == \
        (SCHEMAS / "LICENSE.training-operator").read_bytes()
    assert (manifest.SCHEMAS / "LICENSE.trainer").read_bytes() == (SCHEMAS / "LICENSE.trainer").read_bytes()
    assert set(manifest.schemas()) == {"TFJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime",
                                       "ConfigMap", "ObjectMeta"}


JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  runPolicy: {backoffLimit: 1, activeDeadlineSeconds: 60}
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          securityContext: {runAsUser: 1000}
          containers:
          - name: tensorflow
            image: mine:1
            workingDir: /app
            env: [{name: A, value: "1"}]
            volumeMounts:
            - {name: conf, mountPath: /conf}
            - {name: out, mountPath: /out}
          volumes:
          - {name: conf, configMap: {name: settings}}
          - {name: out, persistentVolumeClaim: {claimName: outputs}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {config.json: "{}"}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tfjob.yaml"
    path.write_text(text)
    return path


def load(tmp_path: Path, text: str) -> tfjob.Plan:
    return tfjob.load(Settings(tfjob=str(write(tmp_path, text))))


def refused(tmp_path: Path, text: str, *expected: str) -> str:
    """The one-line ManifestError loading `text`, which names the file and each of `expected`."""
    with pytest.raises(tfjob.ManifestError) as error:
        load(tmp_path, text)
    message = str(error.value)
    assert "\n" not in message and "\x1b" not in message, message
    assert message.startswith(f"TFJOB={tmp_path / 'tfjob.yaml'}"), message
    for part in expected:
        assert part in message, message
    return message


def replayed(plan: tfjob.Plan, run_dir: Path) -> dict:
    run_dir.mkdir(parents=True)
    write_volumes(plan, run_dir)
    return render(plan, run_dir)


def test_the_example_plans_and_writes_only_under_its_run_folder(tmp_path):
    plan = load(tmp_path, JOB)
    run_dir = tmp_path / "runs" / "r"
    rendered = replayed(plan, run_dir)
    volumes = run_dir / "volumes"
    assert (volumes / "configmaps/settings/config.json").read_text() == "{}"
    assert rendered["services"]["worker-0"]["volumes"] == [f"{volumes}/configmaps/settings:/conf:ro",
                                                           f"{volumes}/outputs:/out"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "runs", "runs/r", "runs/r/volumes", "runs/r/volumes/configmaps", "runs/r/volumes/configmaps/settings",
        "runs/r/volumes/configmaps/settings/config.json", "runs/r/volumes/outputs", "tfjob.yaml"]


# Each value the API server refuses, in the place issue 27 found it taken: (old, new, named).
HOSTILE = [
    # paths built from names: each once wrote outside runs/<RUN>/
    ("data: {config.json: \"{}\"}", "data: {/tmp/evil: x}", "data key is \"/tmp/evil\", expected a ConfigMap key"),
    ("data: {config.json: \"{}\"}", "data: {../../evil: x}", "data key is \"../../evil\""),
    ("data: {config.json: \"{}\"}", "data: {..: x}", "data key is \"..\""),
    ("data: {config.json: \"{}\"}", "data: {..data: x}", "data key is \"..data\""),
    ("data: {config.json: \"{}\"}", "data: {a: x, a: y}", "has the key \"a\" twice in one mapping"),
    ("replicas: 2", "replicas: 60", "has 60 replicas in all; a replay runs at most"),
    ("data: {config.json: \"{}\"}", "data: {\"\": x}", "data key is \"\""),
    ("data: {config.json: \"{}\"}", "data: {\"a\\x1b[31m\": x}", "\\u001b[31m"),
    ("metadata: {name: settings}", "metadata: {name: ../../evil}", "ConfigMap.metadata.name is \"../../evil\""),
    ("metadata: {name: settings}", "metadata: {name: /evil}", "ConfigMap.metadata.name is \"/evil\""),
    ("- {name: conf, configMap", "- {name: ../conf, configMap",
     "volumes[0].name is \"../conf\", expected a DNS-1123 label"),
    ("claimName: outputs", "claimName: ../../evil", "claimName is \"../../evil\""),
    ("claimName: outputs", "claimName: configmaps", "the lab's folder for ConfigMaps"),
    ("{name: conf, configMap: {name: settings}}", "{name: conf, configMap: {name: settings, items: [{key: config.json, "
     "path: ../evil}]}}", "items[0].path is \"../evil\""),
    ("{name: conf, configMap: {name: settings}}", "{name: conf, configMap: {name: settings, items: [{key: config.json, "
     "path: /evil}]}}", "items[0].path is \"/evil\""),
    ("{name: conf, configMap: {name: settings}}", "{name: conf, configMap: {name: settings, items: [{key: config.json, "
     "path: a/../../evil}]}}", "items[0].path is \"a/../../evil\""),
    # wrong types where the lab once gave a traceback
    ("replicas: 2", "replicas: {a: 1}", "spec.tfReplicaSpecs.Worker.replicas is {\"a\": 1}, expected an integer"),
    ("containers:\n", "containers: 7\n          x:\n", "containers is 7, expected a list"),
    ("env: [{name: A, value: \"1\"}]", "env: {A: 1}", "env is {\"A\": 1}, expected a list"),
    ("env: [{name: A, value: \"1\"}]", "env: [A]", "env[0] is \"A\", expected a mapping"),
    ("runPolicy: {backoffLimit: 1, activeDeadlineSeconds: 60}", "runPolicy: lots", "spec.runPolicy is \"lots\""),
    ("      template:\n        spec:\n", "      template: [1]\n      unused:\n        spec:\n",
     "template is [1], expected a mapping"),
    ("data: {config.json: \"{}\"}", "data: {config.json: 1}", "data.config.json is 1, expected a string"),
    ("metadata: {name: mnist}", "metadata: mnist", "metadata is \"mnist\", expected a mapping"),
    ("image: mine:1", "image: [mine]", "image is [\"mine\"], expected a string"),
    ("replicas: 2", "replicas: 99999999999999999999999", "expected an integer from -2147483648 to 2147483647"),
    ("replicas: 2", "replicas: 2019-01-01", "replicas is a YAML date, not JSON data"),
    ("activeDeadlineSeconds: 60", "activeDeadlineSeconds: .inf", "activeDeadlineSeconds is inf, not a JSON number"),
    ("data: {config.json: \"{}\"}", "data: {1: x}", "is a int key; JSON keys are strings"),
    # values Kubernetes refuses that once failed later at compose up
    ("metadata: {name: mnist}", f"metadata: {{name: {'a' * 60}}}", "the host name of worker-0"),
    ("mountPath: /conf}", "mountPath: conf}", "mountPath is \"conf\", expected an absolute path"),
    ("mountPath: /out}", "mountPath: /conf}", "volumeMounts[1] repeats mountPath=\"/conf\""),
    ("mountPath: /out}", "mountPath: /conf/}", "mountPath /conf is also volumeMounts[0]'s"),
    ("workingDir: /app", "workingDir: app", "workingDir is \"app\", expected an absolute path"),
    ("securityContext: {runAsUser: 1000}", "securityContext: {runAsUser: -1}", "runAsUser is -1, expected 0.."),
    ("securityContext: {runAsUser: 1000}", "securityContext: {runAsUser: 1000, runAsGroup: -5}", "runAsGroup is -5"),
    ("securityContext: {runAsUser: 1000}", "securityContext: {runAsUser: 0, runAsNonRoot: true}",
     "runAsNonRoot: true and runAsUser: 0"),
    ("env: [{name: A, value: \"1\"}]", "env: [{name: \"\", value: \"1\"}]", "env[0].name is \"\""),
    ("env: [{name: A, value: \"1\"}]", "env: [{name: \"A=B\", value: \"1\"}]", "env[0].name is \"A=B\""),
    ("env: [{name: A, value: \"1\"}]", "env: [{name: 1A, value: \"1\"}]", "env[0].name is \"1A\""),
    ("env: [{name: A, value: \"1\"}]", "env: [{name: A, value: \"1\"}, {name: A, value: \"2\"}]", "repeats name=\"A\""),
    ("image: mine:1", "image: -rm", "image is \"-rm\", expected an image reference"),
    ("image: mine:1", "image: \"mine 1\"", "image is \"mine 1\""),
    ("image: mine:1", "image: \"mine:1\\n\"", "image is \"mine:1\\n\""),
    ("backoffLimit: 1", "backoffLimit: -1", "backoffLimit is -1, expected 0 or more"),
    ("activeDeadlineSeconds: 60", "activeDeadlineSeconds: -5", "activeDeadlineSeconds is -5, expected 1 or more"),
    ("activeDeadlineSeconds: 60", "activeDeadlineSeconds: 0", "activeDeadlineSeconds is 0, expected 1 or more"),
    ("- {name: out, persistentVolumeClaim", "- {name: conf, persistentVolumeClaim", "volumes[1] repeats name=\"conf\""),
    ("kind: TFJob", "kind: \"TF\\x1bJob\"", "kind is \"TF\\u001bJob\""),
    ("workingDir: /app", "workingDir: /app\n            resources: {limits: {cpu: lots}}", "resources.limits.cpu"),
    ("workingDir: /app", "workingDir: /app\n            resources: {limits: {memory: 99999999999Ti}}",
     "more memory than any engine has"),
]


@pytest.mark.parametrize("old, new, named", HOSTILE, ids=[f"{i}-{h[2][:40]}" for i, h in enumerate(HOSTILE)])
def test_what_kubernetes_refuses_is_refused_in_one_line_naming_the_file_and_field(tmp_path, old, new, named):
    text = textwrap.dedent(JOB)
    assert old in text
    refused(tmp_path, text.replace(old, new, 1), named)


BILLION_LAUGHS = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_the_billion_laughs_bomb_is_refused_in_well_under_a_second(tmp_path):
    assert len(BILLION_LAUGHS) <= 441
    started = time.monotonic()
    refused(tmp_path, BILLION_LAUGHS, f"has more than {manifest.MAX_NODES} YAML nodes")
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("text, named", [
    ("".join(f"k{i}: &a{i} x\n" for i in range(70)) + "l: [" + ",".join(f"*a{i}" for i in range(70)) + "]\n",
     f"more than {manifest.MAX_ALIASES} YAML aliases"),
    ("a: &a [1, *a]\n", "inside its own anchor (a cycle)"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", f"nests deeper than {manifest.MAX_DEPTH} levels"),
    ("a: " + "{b: " * 60 + "1" + "}" * 60 + "\n", f"nests deeper than {manifest.MAX_DEPTH} levels"),
    ("a: !!python/object:os.system {}\n", "is not YAML"),
    ("a: !!binary aGk=\n", "is a YAML bytes, not JSON data"),
    ("- 1\n", "document 1 is not a Kubernetes object"),
    ("a: \"x\\0y\"\n", "holds a NUL character"),
    ("tfReplicaSpecs: [\n", "is not YAML at line 2"),
])
def test_yaml_beyond_the_bounds_is_refused_before_anything(tmp_path, text, named):
    refused(tmp_path, text, named)


def test_a_file_beyond_the_size_bound_is_refused_without_reading_it_whole(tmp_path):
    path = write(tmp_path, "a: " + "x" * (manifest.MAX_BYTES + 10))
    with pytest.raises(tfjob.ManifestError, match=r"^TFJOB=.* is larger than 2 MiB; a manifest is a few KiB$"):
        tfjob.load(Settings(tfjob=str(path)))
    with pytest.raises(tfjob.ManifestError, match=r"^TFJOB=.* is not UTF-8 text \(byte 3\)$"):
        tfjob.load(Settings(tfjob=str(_bytes(tmp_path, b"a: \xff\n"))))
    with pytest.raises(tfjob.ManifestError, match=r"^TFJOB=.* is not a regular file \(a folder, a pipe or a device\)$"):
        tfjob.load(Settings(tfjob=str(tmp_path)))
    with pytest.raises(tfjob.ManifestError, match=r"^TFJOB=.*/missing.yaml cannot be read: No such file or directory$"):
        tfjob.load(Settings(tfjob=str(tmp_path / "missing.yaml")))


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path):
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    started = time.monotonic()
    with pytest.raises(tfjob.ManifestError, match="is not a regular file"):
        tfjob.load(Settings(tfjob=str(pipe)))
    assert time.monotonic() - started < 1


def _bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "raw.yaml"
    path.write_bytes(data)
    return path


def test_unknown_fields_with_hostile_names_are_listed_escaped(tmp_path):
    text = textwrap.dedent(JOB).replace("workingDir: /app", "workingDir: /app\n            \"\\x1b[2J\": 1")
    listed = load(tmp_path, text).not_applied
    assert any("[\"\\u001b[2J\"]" in entry for entry in listed), listed
    assert not any("\x1b" in entry for entry in listed)


def test_a_host_port_is_listed_as_not_applied(tmp_path):
    """A dropped hostPort was said as "not applied: nothing": the replay publishes no port on the host."""
    text = textwrap.dedent(JOB).replace("workingDir: /app", "workingDir: /app\n            ports: [{name: tf-grpc, "
                                        "containerPort: 2222, hostPort: 2222, hostIP: 0.0.0.0, protocol: TCP}]")
    listed = load(tmp_path, text).not_applied
    at = "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].ports[0]"
    assert [entry for entry in listed if ".ports[" in entry] == [f"{at}.hostPort", f"{at}.hostIP"], listed


def test_nested_config_map_item_paths_are_written_as_kubernetes_does(tmp_path):
    text = textwrap.dedent(JOB).replace("{name: conf, configMap: {name: settings}}", "{name: conf, configMap: {name: "
                                        "settings, items: [{key: config.json, path: a/b/c.json}]}}")
    run_dir = tmp_path / "runs" / "r"
    replayed(load(tmp_path, text), run_dir)
    assert (run_dir / "volumes/configmaps/settings-conf/a/b/c.json").read_text() == "{}"
    clash = text.replace("path: a/b/c.json}]", "path: a/b}, {key: config.json, path: a/b/c}]")
    refused(tmp_path, clash, "items[1].path a/b/c clashes with another item's")


def test_the_path_helper_refuses_links_and_climbs_whatever_builds_the_name(tmp_path):
    root = tmp_path / "volumes"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    (root / "file-link").symlink_to(tmp_path / "elsewhere" / "f")
    assert manifest.path_under(root, "a/b/c") == root / "a/b/c" and (root / "a/b").is_dir()
    for bad, named in [("link/x", "link is a link or a file"), ("file-link", "resolves to"),
                       ("../x", "a relative path of plain names"), ("/etc/passwd", "not starting with '/'"),
                       ("a/./b", "a relative path"), ("", "a relative path"), ("..data", "not starting with")]:
        with pytest.raises(tfjob.ManifestError, match=named.replace(".", r"\.")):
            manifest.path_under(root, bad)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    # the run's volumes folder itself a link: refused before anything is written through it
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "volumes").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(tfjob.ManifestError, match="is a link"):
        volume_path(run_dir, "configmaps")


def test_write_volumes_never_follows_a_planted_link(tmp_path):
    plan = load(tmp_path, JOB)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "volumes/configmaps/settings").mkdir(parents=True)
    (tmp_path / "target").write_text("keep")
    (run_dir / "volumes/configmaps/settings/config.json").symlink_to(tmp_path / "target")
    with pytest.raises(tfjob.ManifestError, match="resolves to .* outside"):
        write_volumes(plan, run_dir)
    assert (tmp_path / "target").read_text() == "keep"


def test_run_as_non_root_is_enforced_against_the_images_own_user():
    for user in ('""', '"0"', '"root"', '"0:0"', '"trainer"'):
        with pytest.raises(tfjob.ManifestError, match="runAsNonRoot: true"):
            check_non_root("img:1", user)
    for user in ('"1000"', '"1000:1000"'):
        check_non_root("img:1", user)


def test_run_as_non_root_without_run_as_user_is_left_to_the_image_check(tmp_path):
    text = textwrap.dedent(JOB).replace("securityContext: {runAsUser: 1000}", "securityContext: {runAsNonRoot: true}")
    assert all(task.non_root for task in load(tmp_path, text).tasks)
    assert not any(task.non_root for task in load(tmp_path, JOB).tasks)


def test_the_engine_checks_refuse_root_images_and_cpu_beyond_the_engine(tmp_path, monkeypatch):
    text = textwrap.dedent(JOB).replace("securityContext: {runAsUser: 1000}", "securityContext: {runAsNonRoot: true}")
    text = text.replace("workingDir: /app", "workingDir: /app\n            resources: {limits: {cpu: \"64\"}}")
    plan = load(tmp_path, text)
    engine = FakeEngine(monkeypatch, lambda command: answered(
        command, 0, ('""' if command[1:3] == ["image", "inspect"] else "8") + "\n"))
    with pytest.raises(tfjob.ManifestError, match="image mine:1 runs as root, but its pod asks runAsNonRoot"):
        check_images(plan)
    monkeypatch.setattr("tflab.replay.images.check_non_root", lambda image, user: None)
    with pytest.raises(tfjob.ManifestError, match="worker-0's resources.limits.cpu is 64, more than this Docker "
                                                  "engine's 8 CPUs"):
        check_images(plan)
    infos = [args for args, _, _ in engine.calls if args[0] == "info"]
    assert infos == [("info", "--format", "{{.NCPU}}")]  # read once a check


def test_errors_are_lab_errors_for_the_cli():
    assert issubclass(tfjob.ManifestError, LabError) and tfjob.ManifestError is manifest.ManifestError


def test_the_cli_refuses_a_hostile_manifest_in_one_line_and_writes_nothing(tmp_path):
    from labtest.cli import lab_env, run_lab

    outside = tmp_path / "outside"
    path = write(tmp_path, textwrap.dedent(JOB).replace("data: {config.json: \"{}\"}",
                                                        f"data: {{\"{outside}/evil\": x}}"))
    result = run_lab("up", env=lab_env(TFJOB=str(path), RUNS_DIR=str(tmp_path / "runs"), RUN="never"))
    assert result.returncode != 0 and result.stderr.strip().count("\n") == 0, result.output
    assert "expected a ConfigMap key" in result.stderr
    assert not outside.exists() and not (tmp_path / "runs" / "never").exists()
    assert os.listdir(tmp_path) == ["tfjob.yaml"] or sorted(os.listdir(tmp_path)) == ["runs", "tfjob.yaml"]


def test_two_volumes_that_would_share_a_folder_are_refused(tmp_path):
    """volumes/configmaps/<map>-<volume> for a map's items: a map of that very name, or the same
    volume name with other items in another replica type, would share it (found by the generator)."""
    text = textwrap.dedent(JOB).replace("{name: conf, configMap: {name: settings}}", "{name: x, configMap: {name: "
                                        "settings, items: [{key: config.json, path: a}]}}\n          - {name: conf, "
                                        "configMap: {name: settings-x}}")
    text = text.replace("- {name: conf, mountPath: /conf}", "- {name: conf, mountPath: /conf}\n            "
                                                            "- {name: x, mountPath: /x}")
    text += "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings-x}\ndata: {b: \"2\"}\n"
    refused(tmp_path, text, "volumes/configmaps/settings-x would hold two different things")


def test_the_schemas_ship_in_the_package():
    """hatch's wheel takes every file of the package folder git tracks: the schemas go with
    manifest.py (a wheel built here lists tflab/k8s/schemas/tfjob.json and kubernetes.json)."""
    import subprocess

    import tomllib
    from labtest.cli import REPO

    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["scripts/tflab"] and "exclude" not in wheel
    tracked = subprocess.run(["git", "ls-files", "scripts/tflab/k8s/schemas"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {f"scripts/tflab/k8s/schemas/{name}" for name in ("tfjob.json", "kubernetes.json",
                                                          "LICENSE.training-operator")} <= set(tracked)
    assert manifest.SCHEMAS == Path(manifest.__file__).parent / "schemas"


def test_a_merge_may_be_overridden_but_a_key_not_repeated(tmp_path):
    path = write(tmp_path, "base: &b {a: 1}\nmid: &m {<<: *b, a: 2}\ntop: {<<: *m, c: 3}\n")
    (document,) = manifest.read_documents(path)
    assert document["mid"] == {"a": 2} and document["top"]["c"] == 3  # (PyYAML gives top.a 1 here, go-yaml 2)
    with pytest.raises(tfjob.ManifestError, match=r"has the key \"a\" twice in one mapping \(lines 1 and 2\)"):
        manifest.read_documents(write(tmp_path, "a: 1\na: 2\n"))


# -- a replay's ways in and out: NETWORK, DATA, CLAIMS (issue 35) --------------------------------

def test_a_replay_reaches_out_only_where_the_user_asks(tmp_path):
    plan = load(tmp_path, JOB)
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    write_volumes(plan, run_dir)
    internal = render(plan, run_dir, Settings())["networks"]["cluster"]
    assert internal["internal"] is True
    bridged = render(plan, run_dir, Settings(network="bridge"))["networks"]["cluster"]
    assert "internal" not in bridged and "driver_opts" not in bridged
    said = replay.ways_in(plan, Settings(network="bridge"))
    assert said[0].startswith("network: the replicas may reach the internet (NETWORK=bridge)")
    assert "NETWORK=bridge lets them out" in replay.ways_in(plan, Settings())[0]


def test_data_and_a_claims_host_folder_are_mounted_as_the_user_gave_them(tmp_path):
    data, mnist, out = tmp_path / "data", tmp_path / "mnist", tmp_path / "out"
    for folder in (data, mnist, out):
        folder.mkdir()
    job = textwrap.dedent(JOB).replace("- {name: out, mountPath: /out}",
                                       "- {name: out, mountPath: /out}\n            - {name: in, mountPath: /in}")
    job = job.replace("- {name: out, persistentVolumeClaim: {claimName: outputs}}",
                      "- {name: out, persistentVolumeClaim: {claimName: outputs}}\n"
                      "          - {name: in, persistentVolumeClaim: {claimName: mnist, readOnly: true}}")
    plan = load(tmp_path, job)
    settings = Settings.from_env({"TFJOB": str(write(tmp_path, job)), "DATA": str(data),
                                  "CLAIMS": f"outputs={out}:rw,mnist={mnist}"})  # mnist: rw by default
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    write_volumes(plan, run_dir, settings)
    service = render(plan, run_dir, settings)["services"]["worker-0"]
    volumes = run_dir / "volumes"
    # the claim's readOnly holds though CLAIMS gave it writable; nothing of the claims is made in the run
    assert service["volumes"] == [f"{volumes}/configmaps/settings:/conf:ro", f"{out}:/out", f"{mnist}:/in:ro",
                                  f"{data}:/lab/data:ro"]
    assert service["environment"]["TFLAB_DATA"] == "/lab/data"
    assert sorted(path.name for path in volumes.iterdir()) == ["configmaps"]
    said = replay.ways_in(plan, settings)
    assert f"claim outputs: {out}, writable where the manifest mounts it so (CLAIMS)" in said
    read_only = replay.ways_in(plan, settings.replace(claims=f"mnist={mnist}:ro"))
    assert f"claim mnist: {mnist}, read-only (CLAIMS)" in read_only
    assert any(line.startswith("data: ") and "read-only at /lab/data" in line for line in said)
    # a claim no replica mounts, and DATA where the manifest mounts already: one line each
    with pytest.raises(LabError, match=r"CLAIMS names the claim other, which no replica of TFJOB=.* mounts; "
                                       r"expected mnist, outputs"):
        replay.check_ways_in(plan, Settings.from_env({"TFJOB": str(tmp_path / "tfjob.yaml"),
                                                      "CLAIMS": f"other={out}"}))
    clash = load(tmp_path, textwrap.dedent(JOB).replace("mountPath: /conf", "mountPath: /lab/data"))
    with pytest.raises(LabError, match="DATA=.* is mounted at /lab/data, where worker-0 already mounts"):
        replay.check_ways_in(clash, settings.replace(claims=""))


@pytest.mark.parametrize("value, named", [
    ("data", "'data' is not claim=folder"),
    ("data=", "'data=' is not claim=folder"),
    ("Data=/x", "'Data' is not a claim's name"),
    ("data=/x:rx", "is not claim=folder"),
    ("data=/a,data=/b", "the claim data is given twice"),
    ("data=/no/such/folder", "/no/such/folder, given to the claim data, is not an existing folder"),
])
def test_claims_are_checked_in_one_line(value, named, tmp_path):
    with pytest.raises(Exception) as error:
        Settings.from_env({"TFJOB": str(write(tmp_path, JOB)), "CLAIMS": value})
    assert named in str(error.value) and "\n" not in str(error.value), str(error.value)
    with pytest.raises(Exception, match="CLAIMS=.* is not allowed without TFJOB"):
        Settings().replace(claims="data=/x")


def test_a_claims_folder_the_replicas_cannot_read_is_refused_as_datas_is(tmp_path):
    """DATA's folder had to be readable by everyone (the tasks run as another user); a CLAIMS
    folder the replicas could not read was accepted, and found out only inside a replica."""
    closed, open_ = tmp_path / "closed", tmp_path / "open"
    closed.mkdir(mode=0o700)
    open_.mkdir(mode=0o755)
    closed.chmod(0o000)  # unreadable whoever runs the test: root by its mode, anyone else by access()
    try:
        with pytest.raises(SettingsError) as refused:
            Settings.from_env({"TFJOB": str(write(tmp_path, JOB)), "CLAIMS": f"outputs={closed}:ro"})
    finally:
        closed.chmod(0o700)
    assert str(refused.value) == (
        f"CLAIMS=outputs={closed}:ro is not allowed: {closed}, given to the claim outputs, is not readable by "
        "everyone, and the replicas run as their image's user in a container; expected a folder they can read: "
        f"chmod -R o+rX {closed}")
    settings = Settings.from_env({"TFJOB": str(write(tmp_path, JOB)), "CLAIMS": f"outputs={open_}"})
    assert settings.claims == f"outputs={open_}:rw"


def test_a_claim_the_file_declares_and_a_replica_mounts_is_not_listed_as_not_applied(tmp_path):
    claim = ("\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: %s}\n"
             "spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}\n")
    plan = load(tmp_path, textwrap.dedent(JOB) + claim % "outputs" + claim % "spare")
    assert "PersistentVolumeClaim outputs" not in plan.not_applied
    assert any(line.startswith("PersistentVolumeClaim outputs's spec (mounted as a folder")
               for line in plan.not_applied)
    assert "PersistentVolumeClaim spare (no replica mounts it)" in plan.not_applied


def test_a_replicas_output_is_folded_as_a_scripts_each_line_once(tmp_path):
    """A replica runs no launcher of the lab's: the host folds its streams (a Keras bar came
    through a replay as one line of 19,973 characters), into output.log and <task>.out."""
    from tflab.core import runfolder
    from tflab.supervisor import summary

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    output = FoldedOutput(run_dir, runfolder.OUTPUT)
    output._open()
    read, write_end = os.pipe()
    bar = "".join(f"\r{step:>3}/100 [{'=' * (step // 10):<10}] - loss: {1 / step:.4f}" for step in range(1, 101))
    os.write(write_end, ("Epoch 1/1\n" + bar + "\nEpoch: 1, accur").encode())
    os.write(write_end, b"acy: 0.9\n")
    os.close(write_end)
    shown = output._task_output("worker-0")
    with os.fdopen(read, "rb") as stream:
        output._fold("worker-0", stream, False, shown)
    os.close(shown)
    # after a restart, `docker logs --timestamps`: whole lines, each after the engine's time
    import io
    output._fold("worker-0", io.BytesIO(b"2026-12-06T03:00:00.123456789Z Epoch 2/2\r  1/1 done\n"), True, None)
    output.finish([])
    assert runfolder.script_output_path(run_dir, "worker-0").read_text().splitlines() == \
        ["Epoch 1/1", "100/100 [==========] - loss: 0.0100", "Epoch: 1, accuracy: 0.9"]
    log = (run_dir / runfolder.OUTPUT).read_text()
    assert summary.task_output(log, "worker-0").splitlines() == \
        ["Epoch 1/1", "100/100 [==========] - loss: 0.0100", "Epoch: 1, accuracy: 0.9", "  1/1 done"]


@pytest.mark.parametrize("name, allowed", [("data", True), ("a" * 64 + ".b", True), ("a" * 254, False),
                                           ("-data", False), ("Data", False), ("a..b", False)])
def test_a_claims_name_is_one_grammar_for_the_settings_and_the_manifests(tmp_path, name, allowed):
    """IsDNS1123Subdomain (k8s.io/apimachinery/pkg/util/validation): at most 253, each part unbounded.
    K8S_PVC, CLAIMS and a manifest's claimName read it from core/grammars.py alike."""
    from tflab.core import grammars
    from tflab.k8s import manifest

    assert bool(grammars.DNS1123_SUBDOMAIN.fullmatch(name)) is allowed
    settings_said = manifest_said = True
    try:
        Settings.from_env({}, {"K8S_PVC": name})
    except LabError:
        settings_said = False
    try:
        manifest.dns1123_subdomain(name, "claimName")
    except LabError:
        manifest_said = False
    assert settings_said is manifest_said is allowed


@pytest.mark.parametrize("entries, owner, expected", [
    (["/lab/out"], "1000:1000", ["/lab/out:uid=1000,gid=1000"]),
    (["/lab/out:size=1048576"], "1000", ["/lab/out:size=1048576,uid=1000,gid=1000"]),
    (["/tmp"], "1000:2000", ["/tmp:uid=1000,gid=2000"]),
    (["/tmp"], "0:0", ["/tmp"]),  # root writes it whatever its mode
    (["/tmp"], "", ["/tmp"]),  # the image's user, root
    (["/tmp"], "tflab", ["/tmp"]),  # a name: no uid to give
    (["/tmp"], "1000:staff", ["/tmp"]),
    (["/tmp"], "1000:1000,size=1", ["/tmp"]),  # an image's USER smuggling a mount option
    (["/tmp"], "99999999999", ["/tmp"]),  # past the API server's bound on an id
    (["/tmp"], "1000:99999999999", ["/tmp"]),
])
def test_an_emptydir_stays_writable_by_its_replica_across_a_restart(entries, owner, expected):
    """Docker 20.10 remounts a restarted container's tmpfs 0755 root (measured: 1777 at the first
    start, 755 after `docker start`, mode=1777 given or not; uid/gid options survive), so the
    emptyDir of a non-root replica restarted in place was not writable: its trainer died at
    mkdir. The tmpfs is owned by the replica's numeric user instead."""
    assert stack.owned_tmpfs(entries, owner) == expected


def test_the_rendered_emptydir_is_owned_by_run_as_user_or_the_images_user(tmp_path):
    plan = load(tmp_path, JOB)
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    write_volumes(plan, run_dir)
    for task in plan.tasks:
        task.service["tmpfs"] = ["/scratch"]
        task.service.pop("user", None)
    rendered = render(plan, run_dir, Settings(), {plan.tasks[0].image: {"User": "1000:1000"}})
    assert {s["tmpfs"][0] for s in rendered["services"].values()} == {"/scratch:uid=1000,gid=1000"}
    plan.tasks[0].service["user"] = "2000:3000"
    rendered = render(plan, run_dir, Settings(), {plan.tasks[0].image: {"User": "1000:1000"}})
    assert rendered["services"][plan.tasks[0].name]["tmpfs"] == ["/scratch:uid=2000,gid=3000"]
