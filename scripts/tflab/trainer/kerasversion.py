"""Which Keras a user's script imported, said in its task's log as it happens: the launcher can
only guess from what is installed (tf-keras under TF_USE_LEGACY_KERAS=1), and a script that
`import keras` runs Keras 3 whatever that variable says. An `imported` event for each of `keras`
(Keras 3) and `tf_keras` (what tf.keras is under TF_USE_LEGACY_KERAS=1) once it is imported.

Stdlib only until the script imports one (inscript.py)."""

from __future__ import annotations

from tflab.trainer import inscript

PACKAGES = {"keras": "keras", "tf_keras": "tf-keras"}  # module -> the distribution it comes from


def log_imported(module) -> None:
    version = getattr(module, "__version__", "") or "unknown"
    inscript.task_log().emit("imported", module=module.__name__, version=str(version))


def install() -> None:
    if inscript.task_log():
        for name in PACKAGES:
            inscript.when_imported(name, log_imported)
