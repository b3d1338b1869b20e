"""The limits a cluster meets as it grows, each with its source, checked before anything is written
or started (issue 51): the lab takes any size the cluster's own API takes, and says the size where
a real limit breaks it, where it used to refuse everything past 32 workers.

    env_too_long("TF_CONFIG", 160_000)   # "160,000 bytes, over the 131,061 Linux takes for ..."
    largest_fitting(size_at, env_value_max("TF_CONFIG"), 4096)  # the largest n whose size fits

- One environment string: Linux's execve copies each "NAME=value" string with its NUL, and refuses
  one over MAX_ARG_STRLEN, 32 pages (include/uapi/linux/binfmts.h; fs/exec.c `valid_arg_len`):
  131,072 bytes on 4 KiB pages, what every x86-64 node and most arm64 ones have. Measured here:
  TF_CONFIG=<131,061 bytes> starts a process, one byte more is E2BIG "Argument list too long". A
  container or pod whose TF_CONFIG passes it never starts (volcano#5471 met it at 1,100 pods).
- A replica count: the TFJob's ReplicaSpec.Replicas and a TrainJob's numNodes are int32 in their
  Go types (training-operator pkg/apis/kubeflow.org/v1 common_types.go; trainer v2 trainjob_types.go).

Imports only core/: the trainer, `make config` and `make k8s` all check with it.
"""

from __future__ import annotations

from typing import Callable

ARG_STRLEN_MAX = 32 * 4096  # MAX_ARG_STRLEN on 4 KiB pages: one "NAME=value" string and its NUL
INT32_MAX = 2**31 - 1  # the replica counts' Go type


def env_value_max(name: str) -> int:
    """The longest value environment variable `name` may have: its "NAME=" and NUL count too."""
    return ARG_STRLEN_MAX - len(name) - 2


def largest_fitting(size_of: Callable[[int], int], limit: int, high: int) -> int:
    """The largest n in 0..high whose size_of(n) is at most `limit`, size_of growing with n (a
    binary search: a few dozen calls, whatever high is)."""
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        if size_of(middle) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def env_too_long(name: str, size: int, exact: bool = True) -> str:
    """The words that say a value of `size` bytes for environment variable `name` passes Linux's
    limit ("" where it fits); `exact` False: `size` is a lower bound."""
    if size <= env_value_max(name):
        return ""
    return (f"{'at least ' if not exact else ''}{size:,} bytes, over the {env_value_max(name):,} Linux takes for "
            f"one environment variable ({name}= and its value within MAX_ARG_STRLEN, {ARG_STRLEN_MAX:,} bytes: "
            "include/uapi/linux/binfmts.h), so no process, container or pod of it starts (exec fails: Argument "
            "list too long)")
