"""Kubernetes: the manifests `make k8s` writes (writer), the TFJob and TrainJob readers and their
replay plans, the operator's rules as its code has them, and the vendored schemas they are checked
against."""
