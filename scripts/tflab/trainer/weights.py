"""What the lab's trainer says of its final weights in its `end` event: a digest that two runs'
weights are equal by (weights_sha256), and a fingerprint they can be compared by within a
tolerance (make chaos's verdict, faults/verdict.py). NumPy only, no TensorFlow: the weights come
as arrays."""

from __future__ import annotations

import hashlib

import numpy as np

from tflab.core.schema import loss_field


def weights_digest(weights) -> str:
    """sha256 of every weight as little-endian float32, in layer order: equal weights, equal digest."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(np.ascontiguousarray(w, dtype="<f4").tobytes())
    return digest.hexdigest()


def weights_fingerprint(names: list[str], weights) -> list[dict]:
    """Per variable, its name, size, sum and L2 norm (summed in float64): numbers that two runs'
    weights can be compared by within a tolerance (make chaos's verdict, faults/verdict.py), where
    the digest can only say equal or not."""
    found = []
    for name, w in zip(names, weights):
        values = np.asarray(w, dtype=np.float64)
        found.append({"name": str(name), "size": int(values.size), "sum": loss_field(values.sum()),
                      "l2": loss_field(np.sqrt(np.square(values).sum()))})
    return found
