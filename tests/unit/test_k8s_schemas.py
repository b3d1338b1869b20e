"""`make k8s`'s manifests against the real schemas: the TFJob against training-operator v1.9's own
CRD, the TrainJob and its runtime against Kubeflow Trainer v2.3.0's (tests/unit/schemas/, held
strict as the API server's strict field validation holds them), every
other object and the TFJob's metadata against Kubernetes' own schemas, from `kubernetes-validate`
(offline: the wheel ships them), for every Kubernetes version it knows. And that both can fail."""

import copy
import functools
import hashlib
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import referencing
import yaml
from kubernetes_validate.utils import all_versions, schema_contents
from labtest.cli import lab_env, run_lab
from tflab.k8s import trainerreleases

SCHEMAS = Path(__file__).parent / "schemas"
CRD = SCHEMAS / "kubeflow.org_tfjobs.yaml"
CRD_BLOB = "a5e75eea9e47a97cf2bbfcbb6cd18d7de4d2618f"  # v1.9.0's, as schemas/README.md says
# Kubeflow Trainer v2.3.0's CRDs (tag v2.3.0, 658725bd), kind -> (file, git blob), as schemas/README.md says
TRAINER_CRDS = {
    "TrainJob": ("trainer.kubeflow.org_trainjobs.yaml", "a5f2a17714acd92c11be743562498e83e20c25d1"),
    "TrainingRuntime": ("trainer.kubeflow.org_trainingruntimes.yaml", "92de7e94370bd4f2b2e8468a97f7251607a88367"),
    "ClusterTrainingRuntime": ("trainer.kubeflow.org_clustertrainingruntimes.yaml",
                               "567ec335d01e171ba0e41f63fc59da6cc34e4b9f"),
}
# Trainer v2.2.1's (tag v2.2.1, c505fc7c), the release before, in schemas/trainer-v2.2.1/: every
# trainjob.yaml is held to both (trainerreleases.TRAINER_RELEASES; v2.4.0, with no CRD here, is
# v2.3.0 plus one stated rule)
EARLIER_TRAINER_CRDS = {
    "TrainJob": ("trainer-v2.2.1/trainer.kubeflow.org_trainjobs.yaml", "a4418a0b52da8ff9f6cc8dc734eab2acb6d1d69d"),
    "TrainingRuntime": ("trainer-v2.2.1/trainer.kubeflow.org_trainingruntimes.yaml",
                        "cf2d0654ff60eb117f2814dc1ab9156d05d136b2"),
    "ClusterTrainingRuntime": ("trainer-v2.2.1/trainer.kubeflow.org_clustertrainingruntimes.yaml",
                               "e947075b5b30ec52b718889dccb169e56dc4c797"),
}
KUBERNETES = all_versions()  # 1.25 ... 1.37 with kubernetes-validate 1.37.0
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

# Every shape `make k8s` writes (GPUS it refuses): (name, settings), K8S_PVC where an evaluator
# needs a shared claim to read the chief's checkpoints from.
SHAPES = [
    ("multiworker", ["WORKERS=2"]),
    ("multiworker-1", ["WORKERS=1"]),  # one pod in all: the template carries TF_CONFIG
    ("chief", ["CHIEF=1", "WORKERS=2", "GLOBAL_BATCH=96"]),
    ("evaluator", ["EVALUATOR=1", "WORKERS=2", "K8S_PVC=shared-runs"]),
    ("chief-evaluator", ["CHIEF=1", "EVALUATOR=1", "WORKERS=2", "GLOBAL_BATCH=96", "K8S_PVC=shared-runs"]),
    ("parameter_server", ["STRATEGY=parameter_server", "WORKERS=2", "PS=1"]),
    ("parameter_server-evaluator", ["STRATEGY=parameter_server", "WORKERS=2", "PS=1", "EVALUATOR=1",
                                    "K8S_PVC=shared-runs"]),
    ("pvc-backup", ["WORKERS=3", "GLOBAL_BATCH=96", "K8S_PVC=shared-runs", "BACKUP=epoch", "RESTARTS=3"]),
    ("limits-no-restarts", ["WORKERS=2", "CPUS=0.5", "MEMORY=512m", "RESTARTS=0", "TIMEOUT=60.5"]),
    ("bridge", ["WORKERS=2", "NETWORK=bridge", "K8S_NAME=mnist", "K8S_NAMESPACE=team-a",
                "K8S_IMAGE=registry.example/team/tflab:1"]),
    ("restart-policies", ["WORKERS=2", "RESTART_POLICY=OnFailure"]),  # the default ExitCode: every other shape
    ("restart-never", ["WORKERS=2", "RESTART_POLICY=Never", "RESTARTS=0"]),
    ("namespaced-runtime", ["WORKERS=3", "GLOBAL_BATCH=96", "K8S_RUNTIME=namespaced", "K8S_NAMESPACE=team-a",
                            "K8S_NAME=mnist", "CPUS=1.5", "MEMORY=2g", "RESTARTS=0"]),
    ("single", ["STRATEGY=single"]),
    ("mirrored", ["STRATEGY=mirrored"]),
]


@pytest.fixture(autouse=True, scope="module")
def schemas_read_once():
    """kubernetes-validate reads a schema's JSON files (1.8 MB of definitions a version) on every
    call: read once, the same checks take a fifth of the time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kubernetes_validate.utils, "schema_contents", functools.cache(schema_contents))
        yield


def written(tmp_path: Path, settings: list[str]) -> dict[str, list[dict]]:
    """The files `make k8s` writes for these settings, read back by a real YAML parser."""
    runs = tmp_path / "runs"
    given_image = any(setting.startswith("K8S_IMAGE=") for setting in settings)
    image = [] if given_image else ["K8S_IMAGE=registry.example/tflab:test"]  # not the engine's: the default builds
    result = run_lab("k8s", f"RUNS_DIR={runs}", "RUN=k8s", *settings, *image, env=lab_env())
    assert result.returncode == 0, result.output
    return {path.name: list(yaml.safe_load_all(path.read_text())) for path in sorted((runs / "k8s").iterdir())}


# The CRD's schema as the API server applies it. An openAPIV3Schema is not quite JSON Schema:
# `nullable` widens the type, and the x-kubernetes-list-type keywords ask for unique items
# (`set`) or unique keys (`map`); the rest (formats, int-or-string's anyOf, patterns) reads as is.
# Strict field validation rejects a field no schema lists unless the object preserves unknown
# fields, so every object schema that lists properties gets `additionalProperties: false`.
def strict(schema: dict) -> dict:
    schema = dict(schema)
    if schema.get("nullable") and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    if "properties" in schema:
        schema["properties"] = {name: strict(sub) for name, sub in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = strict(schema["additionalProperties"])
    if "items" in schema:
        schema["items"] = strict(schema["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            schema[key] = [strict(sub) for sub in schema[key]]
    return schema


def list_type(validator, kind, items, schema):
    if not validator.is_type(items, "array") or kind not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen = set()
    for item in items:
        key = json.dumps([item.get(k) for k in keys] if kind == "map" else item, sort_keys=True)
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key} in a list of x-kubernetes-list-type {kind}")
        seen.add(key)


OpenAPIValidator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-list-type": list_type})


@functools.cache
def crd() -> dict:
    return yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def tfjob_validator() -> jsonschema.protocols.Validator:
    (v1,) = [version for version in crd()["spec"]["versions"] if version["name"] == "v1"]
    schema = strict(v1["schema"]["openAPIV3Schema"])
    OpenAPIValidator.check_schema(schema)
    return OpenAPIValidator(schema)


@functools.cache
def object_meta_validator(version: str) -> jsonschema.protocols.Validator:
    """The API server validates every object's metadata as ObjectMeta, which the CRD leaves open."""
    definitions = schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version)
    registry = referencing.Registry().with_resource(definitions["$id"], referencing.Resource.from_contents(definitions))
    return jsonschema.Draft202012Validator({"$ref": f"{definitions['$id']}#/$defs/{OBJECT_META}"}, registry=registry)


@functools.cache
def trainer_crd(kind: str, crds: tuple = ()) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((SCHEMAS / dict(crds or TRAINER_CRDS.items())[kind][0]).read_text(), Loader=loader)


@functools.cache
def trainer_validator(kind: str, crds: tuple = ()) -> jsonschema.protocols.Validator:
    (v1alpha1,) = [version for version in trainer_crd(kind, crds)["spec"]["versions"] if version["name"] == "v1alpha1"]
    schema = strict(v1alpha1["schema"]["openAPIV3Schema"])
    OpenAPIValidator.check_schema(schema)
    return OpenAPIValidator(schema)


def trainer_errors(document: dict) -> list[str]:
    """A TrainJob, TrainingRuntime or ClusterTrainingRuntime against Trainer v2.3.0's CRD and
    v2.2.1's, strict, and its metadata as ObjectMeta (a cluster-scoped runtime has no namespace)."""
    earlier = tuple(EARLIER_TRAINER_CRDS.items())
    errors = [*trainer_validator(document["kind"]).iter_errors(document),
              *trainer_validator(document["kind"], earlier).iter_errors(document),
              *(error for version in KUBERNETES
                for error in object_meta_validator(version).iter_errors(document["metadata"]))]
    if document["kind"] == "ClusterTrainingRuntime" and "namespace" in document["metadata"]:
        errors.append(jsonschema.ValidationError("a cluster-scoped object has no namespace"))
    return [f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}" for error in errors]


def tfjob_errors(tfjob: dict) -> list[str]:
    errors = [*tfjob_validator().iter_errors(tfjob),
              *(error for version in KUBERNETES
                for error in object_meta_validator(version).iter_errors(tfjob["metadata"]))]
    return [f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}" for error in errors]


def kubernetes_errors(document: dict) -> list[str]:
    errors = []
    for version in KUBERNETES:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            errors.append(f"{version}: {'.'.join(map(str, error.path))}: {error.message}")
    return errors


def test_the_crd_is_training_operator_v1_9s_byte_for_byte():
    content = CRD.read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest() == CRD_BLOB
    assert crd()["metadata"]["name"] == "tfjobs.kubeflow.org"
    assert KUBERNETES[0] == "1.25.0" and len(KUBERNETES) >= 13  # kubernetes-validate ships its schemas


@pytest.mark.parametrize("kind", list(TRAINER_CRDS))
def test_the_trainer_crds_are_v2_3_0s_byte_for_byte(kind):
    name, blob = TRAINER_CRDS[kind]
    content = (SCHEMAS / name).read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest() == blob
    crd_ = trainer_crd(kind)
    assert crd_["spec"]["names"]["kind"] == kind and crd_["spec"]["group"] == "trainer.kubeflow.org"
    assert crd_["spec"]["scope"] == ("Cluster" if kind == "ClusterTrainingRuntime" else "Namespaced")


@pytest.mark.parametrize("kind", list(EARLIER_TRAINER_CRDS))
def test_the_earlier_trainer_crds_are_v2_2_1s_byte_for_byte(kind):
    name, blob = EARLIER_TRAINER_CRDS[kind]
    content = (SCHEMAS / name).read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest() == blob
    assert trainer_crd(kind, tuple(EARLIER_TRAINER_CRDS.items()))["spec"]["names"]["kind"] == kind


@pytest.mark.parametrize("settings", [settings for _, settings in SHAPES], ids=[name for name, _ in SHAPES])
def test_every_manifest_passes_the_real_schemas(settings, tmp_path):
    files = written(tmp_path, settings)
    kinds = [document["kind"] for documents in files.values() for document in documents]
    assert "Job" in kinds and ("TFJob" in kinds) == ("tfjob.yaml" in files)
    assert ("TrainJob" in kinds) == ("trainjob.yaml" in files) == (
        "STRATEGY=single" not in settings and "STRATEGY=mirrored" not in settings
        and "STRATEGY=parameter_server" not in settings and "CHIEF=1" not in settings
        and "EVALUATOR=1" not in settings)
    for name, documents in files.items():
        for document in documents:
            where = f"{name}: {document['kind']} {document['metadata']['name']}"
            if document["kind"] == "TFJob":
                assert tfjob_errors(document) == [], where
            elif document["kind"] in TRAINER_CRDS:
                assert trainer_errors(document) == [], where
                # v2.4.0 has no CRD here to validate against: its one stated rule is the lab's own
                assert trainerreleases.trainer_refusals(document, document["kind"]) == {}, where
            else:
                assert kubernetes_errors(document) == [], where


@pytest.fixture(scope="module")
def chief_and_workers(tmp_path_factory) -> dict[str, list[dict]]:
    return written(tmp_path_factory.mktemp("k8s"), ["CHIEF=1", "WORKERS=2", "GLOBAL_BATCH=96"])


def changed(document: dict, path: str, value) -> dict:
    """A copy with the value at a dotted path (list indices as numbers) set."""
    document = copy.deepcopy(document)
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    target = document
    for part in parents:
        target = target[part]
    target[last] = value
    return document


WORKER = "spec.tfReplicaSpecs.Worker"
CONTAINER = f"{WORKER}.template.spec.containers.0"


@pytest.mark.parametrize("path, value, expected", [
    ("spec.replicaSpecs", {}, "Additional properties are not allowed ('replicaSpecs' was unexpected)"),
    (f"{WORKER}.replica", 2, "'replica' was unexpected"),
    (f"{CONTAINER}.imagePullPolice", "Always", "'imagePullPolice' was unexpected"),
    (f"{CONTAINER}.securityContext.capabilities.remove", ["ALL"], "'remove' was unexpected"),
    (f"{WORKER}.replicas", "2", "'2' is not of type 'integer'"),
    (f"{CONTAINER}.ports.0.containerPort", "2222", "'2222' is not of type 'integer'"),
    (f"{CONTAINER}.resources", {"limits": {"memory": "512 MiB"}}, "does not match"),
    ("spec.runPolicy.backoffLimit", 1.5, "1.5 is not of type 'integer'"),
    (f"{CONTAINER}.env.1", {"name": "TFLAB_CONFIG", "value": "again"}, "duplicate entry"),
    (f"{CONTAINER}.command", "python -m tflab.train", "is not of type 'array'"),
    ("metadata.label", {"a": "b"}, "'label' was unexpected"),
    ("metadata.labels", {"a": 1}, "1 is not of type 'string'"),
])
def test_the_crd_rejects_an_unknown_field_or_a_wrong_type(chief_and_workers, path, value, expected):
    (tfjob,) = [document for document in chief_and_workers["tfjob.yaml"] if document["kind"] == "TFJob"]
    assert tfjob_errors(tfjob) == []
    errors = tfjob_errors(changed(tfjob, path, value))
    assert errors and all(expected in error for error in errors), errors


@pytest.mark.parametrize("kind, path, value, expected", [
    ("Service", "spec.clusterIp", "None", "'clusterIp' was unexpected"),
    ("Job", "spec.backoffLimit", "2", "'2' is not of type 'integer'"),
    ("Job", "spec.template.spec.containers.0.securityContext.runAsUser", "1000", "'1000' is not of type 'integer'"),
    ("Job", "spec.template.spec.volumes.0.configMap.name", ["tflab-config"], "is not of type 'string'"),
    ("ConfigMap", "data.config.json", 1, "1 is not of type 'string'"),
    ("NetworkPolicy", "spec.policyType", ["Ingress"], "'policyType' was unexpected"),
])
def test_kubernetes_schemas_reject_an_unknown_field_or_a_wrong_type(chief_and_workers, kind, path, value, expected):
    document = next(d for d in chief_and_workers["jobs.yaml"] if d["kind"] == kind)
    assert kubernetes_errors(document) == []
    if path == "data.config.json":  # a key with a dot in it
        document = copy.deepcopy(document)
        document["data"]["config.json"] = value
    else:
        document = changed(document, path, value)
    errors = kubernetes_errors(document)
    assert len(errors) == len(KUBERNETES) and all(expected in error for error in errors), errors


TRAINER = "spec.trainer"
NODE_POD = "spec.template.spec.replicatedJobs.0.template.spec.template.spec"


@pytest.mark.parametrize("kind, path, value, expected", [
    ("TrainJob", "spec.trainers", {}, "'trainers' was unexpected"),
    ("TrainJob", f"{TRAINER}.numNode", 3, "'numNode' was unexpected"),
    ("TrainJob", f"{TRAINER}.numNodes", "3", "'3' is not of type 'integer'"),
    ("TrainJob", f"{TRAINER}.env.0.valueFrm", {}, "'valueFrm' was unexpected"),
    ("TrainJob", "spec.runtimeRef.namespace", "x", "'namespace' was unexpected"),
    ("TrainJob", "spec.activeDeadlineSeconds", 0, "0 is less than the minimum of 1"),
    ("ClusterTrainingRuntime", "spec.mlPolicy.numNode", 3, "'numNode' was unexpected"),
    ("ClusterTrainingRuntime", f"{NODE_POD}.containers.0.imagePullPolice", "Always",
     "'imagePullPolice' was unexpected"),
    ("ClusterTrainingRuntime", "spec.template.spec.failurePolicy.maxRestart", 1, "'maxRestart' was unexpected"),
    ("ClusterTrainingRuntime", f"{NODE_POD}.containers.0.ports.0.containerPort", "2222", "is not of type 'integer'"),
])
def test_the_trainer_crds_reject_an_unknown_field_or_a_wrong_type(tmp_path_factory, kind, path, value, expected):
    files = trainjob_files(tmp_path_factory)
    document = next(d for d in files["trainjob.yaml"] if d["kind"] == kind)
    assert trainer_errors(document) == []
    errors = trainer_errors(changed(document, path, value))
    assert errors and all(expected in error for error in errors), errors


_written_trainjob: dict = {}


def trainjob_files(tmp_path_factory) -> dict[str, list[dict]]:
    if not _written_trainjob:
        _written_trainjob.update(written(tmp_path_factory.mktemp("trainjob"), ["WORKERS=3", "GLOBAL_BATCH=96"]))
    return _written_trainjob


@pytest.mark.parametrize("settings", [["WORKERS=2"], ["WORKERS=1", "K8S_RUNTIME=namespaced"]], ids=["two", "one"])
def test_a_tfjob_turned_into_a_trainjob_passes_trainers_schemas(tmp_path, settings):
    """`tflab k8s TFJOB=`'s trainjob.yaml, from what `make k8s` wrote, against the same CRDs."""
    files = written(tmp_path / "first", settings)
    tfjob = tmp_path / "tfjob.yaml"
    tfjob.write_text(yaml.safe_dump_all(files["tfjob.yaml"]))
    runtime = [s for s in settings if s.startswith("K8S_RUNTIME=")]
    result = run_lab("k8s", f"TFJOB={tfjob}", f"RUNS_DIR={tmp_path / 'runs'}", "RUN=converted", *runtime, env=lab_env())
    assert result.returncode == 0, result.output
    documents = list(yaml.safe_load_all((tmp_path / "runs" / "converted" / "trainjob.yaml").read_text()))
    assert {d["kind"] for d in documents} >= {"TrainJob", "ConfigMap"}
    for document in documents:
        if document["kind"] in TRAINER_CRDS:
            assert trainer_errors(document) == [], document["kind"]
        else:
            assert kubernetes_errors(document) == [], document["kind"]
