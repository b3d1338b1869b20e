"""The sizes `make k8s` checks before it builds or writes anything (issue 51): what Kubernetes and
Linux would refuse on the cluster at the manifests' size, each named with its source, where the lab
used to refuse every size past 32. Linux's own limit and the TF_CONFIG's size are core/limits.py's
and core/cluster.py's; this adds the manifests' addresses and names.

    sizes.check(settings, trainjob=True)   # LabError (or SettingsError): one line, the size that fits
"""

from __future__ import annotations

from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings

# Kubernetes' names: a Service's is a DNS-1035 label and a pod's hostname a DNS-1123 label, 63
# characters at most (k8s.io/apimachinery/pkg/util/validation: DNS1035LabelMaxLength,
# DNS1123LabelMaxLength; the Service's name is its pod's hostname in the operator's TF_CONFIG).
LABEL_MAX = 63


def check(settings: Settings, trainjob: bool) -> None:
    """Refuses, in one line and before anything is built or written, a cluster of a size that
    Kubernetes or Linux would refuse on the cluster: a Service name over 63 characters, or a pod's
    TF_CONFIG over Linux's limit for one environment string. The operator's TF_CONFIG is the longest
    the files carry (jobs.yaml's is the lab's, without "environment"); a TrainJob's nodes make theirs
    at their start (trainer/tfconfig.py) from JobSet's addresses, checked where `trainjob` is written."""
    jobs = cluster.job_sizes(settings)
    longest = max((cluster.kubeflow_service(settings.k8s_name, job, size - 1) for job, size in jobs.items()),
                  key=len, default="")
    if len(longest) > LABEL_MAX:
        room = 10 ** (LABEL_MAX - len(f"{settings.k8s_name}-worker-")) if "worker" in jobs else 0
        raise LabError(f"WORKERS={settings.workers} is not allowed with K8S_NAME={settings.k8s_name}: the Service "
                       f"{longest} is {len(longest)} characters, over the {LABEL_MAX} of a DNS-1035 label "
                       "(Kubernetes' rule for a Service's name); expected a shorter K8S_NAME"
                       + (f", or at most {room} workers" if room else ""))
    cluster.check_tf_config(settings, cluster.kubeflow_address(settings.k8s_name, settings.k8s_namespace),
                            cluster.tfjob_tf_config)
    if jobs and trainjob:
        cluster.check_tf_config(settings, cluster.trainjob_address(settings.k8s_name))
