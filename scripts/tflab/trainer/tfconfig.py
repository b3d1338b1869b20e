"""TF_CONFIG for a Kubeflow Trainer v2 TrainJob's node, built in its pod, then the user's command.

    python -m tflab.trainer.tfconfig python -m tflab.train     # the runtime's command + the TrainJob's args

Trainer v2 (v2.3.0) ships no TensorFlow runtime: the lab's runtime has no framework plugin, so
nothing gives a node TF_CONFIG. What JobSet does give each pod is enough: the Job's completion
index (JOB_COMPLETION_INDEX, as Kubernetes sets it in an Indexed Job) and a hostname,
`<trainjob>-node-0-<index>`. The node count is the one thing no pod of a plain runtime is told, so
the TrainJob says it beside numNodes (TFLAB_NUM_NODES in spec.trainer.env; `make k8s` writes both).

This sets TF_CONFIG and TFLAB_TASK from those with cluster.trainjob_tf_config_env, the function the
replay (`tflab up TRAINJOB=`) uses for the same node, and replaces itself with the command it was
given (os.execvp): the command is the user's, whatever it is. Standard library and tflab.core.cluster
only; a wrong environment is one line on stderr and exit code 2, before the command runs.
"""

import os
import socket
import sys

from tflab.core import cluster

USAGE = 2
NOT_FOUND = 127  # what a shell says for a command it cannot find


def environment(env, hostname: str) -> dict[str, str]:
    """TF_CONFIG and TFLAB_TASK for this pod; ValueError naming what is missing or wrong."""
    index_text = env.get("JOB_COMPLETION_INDEX", "")
    nodes_text = env.get(cluster.NUM_NODES_ENV, "")
    if not index_text.isdigit():
        raise ValueError(f"JOB_COMPLETION_INDEX is {index_text!r}, expected a number (Kubernetes sets it in the "
                         "pods of an Indexed Job, which JobSet makes of a TrainJob's nodes)")
    if not nodes_text.isdigit() or int(nodes_text) < 1:
        raise ValueError(f"{cluster.NUM_NODES_ENV} is {nodes_text!r}, expected the TrainJob's numNodes "
                         f"(spec.trainer.env: a number, 1 or more)")
    return cluster.trainjob_tf_config_env(hostname, int(index_text), int(nodes_text))


def main(argv: list[str] | None = None) -> int:
    command = sys.argv[1:] if argv is None else argv
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        if not command:
            raise ValueError("expected the command to run after it (the TrainJob's spec.trainer.args)")
        found = environment(os.environ, socket.gethostname())
    except ValueError as error:
        print(f"tflab.trainer.tfconfig: {error}", file=sys.stderr, flush=True)
        return USAGE
    print(f"[{found['TFLAB_TASK']}] TF_CONFIG={found['TF_CONFIG']}", file=sys.stderr, flush=True)
    try:
        os.execvpe(command[0], command, {**os.environ, **found})
    except OSError as error:
        print(f"tflab.trainer.tfconfig: cannot run {command[0]!r}: {error.strerror or error}", file=sys.stderr,
              flush=True)
        return NOT_FOUND


if __name__ == "__main__":
    sys.exit(main())
