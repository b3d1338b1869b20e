"""Which Kubeflow Trainer releases take a TrainJob or its runtime, and one line saying which refuse it.

The lab's policy, from this module's two answers: `make k8s` and `tflab k8s TFJOB=` write nothing
any release checked here refuses; a replay (`tflab up TRAINJOB=`) refuses what the newest refuses,
and runs, saying so in one line, what only an earlier one refuses.

v2.3.0 and v2.2.1 are checked by their CRDs' schemas (manifest.schemas, earlier_trainer_schemas).
v2.4.0's CRDs are not to be had here (issue 44: kubeflow/trainer's tags as mirrored go up to v2.3.0,
and its master to 2026-08-21 holds no such rule), so v2.4.0 is v2.3.0's schemas plus the one
breaking rule its release note states: a runtime's ReplicatedJob names at most 20 characters
(kubeflow/trainer#4394). Every line that rule gives says it comes from the release note.
"""

from __future__ import annotations

from tflab.k8s.manifest import Schema, earlier_trainer_schemas, schemas

# Newest first. v2.3.0 is the newest whose CRDs are public, v2.2.1 the one before it; v2.4.0 is taken to
# refuse whatever v2.3.0 does: its release note names one breaking rule, and no other change is known.
TRAINER_RELEASES = ("v2.4.0", "v2.3.0", "v2.2.1")
TRAINER_KINDS = ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
MAX_REPLICATED_JOB_NAME = 20  # Trainer v2.4.0, by its release note (kubeflow/trainer#4394)


def trainer_refusals(document, kind: str) -> dict[str, str]:
    """Trainer release -> the first place `document` (a TrainJob or runtime) breaks that release's
    rules; empty where every release in TRAINER_RELEASES takes it."""
    stated, newest_crds, earlier_crds = TRAINER_RELEASES
    found = {newest_crds: Schema.first_error(schemas()[kind], document, ""),
             earlier_crds: Schema.first_error(earlier_trainer_schemas(earlier_crds)[kind], document, "")}
    found[stated] = found[newest_crds] or long_replicated_job_name(document, kind)
    return {release: error for release in TRAINER_RELEASES if (error := found[release])}


def long_replicated_job_name(document, kind: str) -> str | None:
    """Trainer v2.4.0's one breaking rule as its release note states it (no v2.4.0 CRD is here to
    derive it from): a runtime's spec.template.spec.replicatedJobs[*].name is at most
    MAX_REPLICATED_JOB_NAME characters. Asked only once v2.3.0's schema has taken the document, so
    each field present has its type and every ReplicatedJob its (required) name."""
    if kind == "TrainJob":
        return None
    jobs = document.get("spec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
    for index, job in enumerate(jobs):
        if len(job["name"]) > MAX_REPLICATED_JOB_NAME:
            return (f"spec.template.spec.replicatedJobs[{index}].name has {len(job['name'])} characters, expected at "
                    f"most {MAX_REPLICATED_JOB_NAME} (the rule of v2.4.0's release note, kubeflow/trainer#4394; no "
                    "v2.4.0 CRD is available here)")
    return None


def refused_by(refusals: dict[str, str]) -> str:
    """One line: which Trainer releases refuse it, which take it, and where (the reason of the
    newest that refuses)."""
    releases = [release for release in TRAINER_RELEASES if release in refusals]
    takes = [release for release in TRAINER_RELEASES if release not in refusals]
    who = f"Trainer {listed(releases)} {'refuse' if len(releases) > 1 else 'refuses'} it"
    took = f" ({listed(takes)} {'take' if len(takes) > 1 else 'takes'} it)" if takes else ""
    return f"{who}{took}: {refusals[releases[0]]}"


def listed(releases: list[str]) -> str:
    """v2.3.0 and v2.2.1; v2.4.0, v2.3.0 and v2.2.1."""
    return " and ".join(releases) if len(releases) < 3 else f"{', '.join(releases[:-1])} and {releases[-1]}"


def first_refused(documents: list[dict]) -> str:
    """`<kind> <name>: <refused_by>` for the first of the objects a lab writes (each well formed)
    that a release refuses, or "" where every release takes them all: what `make k8s` and
    `tflab k8s TFJOB=` check before writing anything."""
    for document in documents:
        refusals = trainer_refusals(document, document["kind"]) if document["kind"] in TRAINER_KINDS else {}
        if refusals:
            return f"{document['kind']} {document['metadata']['name']}: {refused_by(refusals)}"
    return ""
