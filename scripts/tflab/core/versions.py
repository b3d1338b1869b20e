"""The TensorFlow versions the lab can build a trainer image for (TF=), and the Keras each can have
(KERAS=): one table, read by grammars.py (the grammar), images/__init__.py (the lock file and image of each)
and matrix.py (which cells cannot be). Stdlib only (and task.py, the contract): both sides of the walls read it.

    TF=2.15        the newest patch of that minor line that PyPI has with CPython 3.11 wheels
    TF=next        the newest pre-release (2.22.0rc0 on 2026-12-05)
    TF= (empty)    the lab's own image, TensorFlow 2.21 (requirements/trainer.txt)
    KERAS=bundled  the Keras 2 a TF <= 2.15 wheel brings as tf.keras
    KERAS=tf-keras tf_keras, with TF_USE_LEGACY_KERAS=1 (TF 2.14 on: PyPI has tf-keras 2.14.1 to 2.21.0)
    KERAS=keras3   Keras 3, tf.keras from TF 2.16 on
    KERAS= (empty) tf-keras from 2.16 on (the lab's default, as on 2.21), bundled before
    KERAS=3.15     a Keras release (the newest patch of that minor, or 3.15.1 itself) in place of the
                   Keras 3 the TF line brings, TF 2.16 on; KERAS=nightly: one pinned keras-nightly
                   (KERAS_RELEASES: its date said). One lock per TF x release
                   (requirements/keras/<tf>-<keras>.txt, keraslock.py), which may say pip cannot install it.
"""

from __future__ import annotations

import re

from tflab.core import task

# minor line -> the exact tensorflow-cpu release its lock file pins (requirements/tf/<minor>.txt).
RELEASES = {"2.12": "2.12.1", "2.13": "2.13.1", "2.14": "2.14.1", "2.15": "2.15.1", "2.16": "2.16.2",
            "2.17": "2.17.1", "2.18": "2.18.1", "2.19": "2.19.1", "2.20": "2.20.0", "2.21": "2.21.0",
            "2.22": "2.22.0rc0"}
NEXT = "2.22"  # TF=next: the newest pre-release
DEFAULT = "2.21"  # the lab's own image (requirements/trainer.txt): TF empty
# minor line -> the tf-keras release that goes with it; a line missing here has none.
TF_KERAS = {"2.14": "2.14.1", "2.15": "2.15.1", "2.16": "2.16.0", "2.17": "2.17.0", "2.18": "2.18.0",
            "2.19": "2.19.0", "2.20": "2.20.1", "2.21": "2.21.0"}
KERAS_3_FROM = "2.16"  # tf.keras is Keras 3 from this line on, Keras 2 (bundled) before
KERAS_CHOICES = ("keras3", "tf-keras", "bundled")
# KERAS=<release>: Keras minor line (or nightly) -> the release its locks pin. Every minor from the
# oldest any TF line here can install (TF 2.16 asks keras>=3.0; TF 2.21 keras>=3.12) to PyPI's
# newest, so a matrix can say where a failure starts; keras-nightly is the dated build TF 2.22.0rc0
# was locked with (pip index versions --pre keras-nightly, 2026-12-06: the newest then too).
KERAS_RELEASES = {"3.10": "3.10.0", "3.11": "3.11.3", "3.12": "3.12.4", "3.13": "3.13.2", "3.14": "3.14.1",
                  "3.15": "3.15.1", "nightly": "3.16.0.dev2026102704"}
NIGHTLY_DATE = "2026-10-27"  # the date in keras-nightly's version (dev<YYYYMMDDHH>)
# KERAS=keras3's release: what the locks of TF 2.16 to 2.21 (requirements/tf/, requirements/trainer.txt)
# pin; TF=next's pins keras-nightly, KERAS_RELEASES["nightly"] (tests/unit/test_precision.py holds both).
KERAS_3_OF_THE_LINES = "3.15"
KERAS_DISTRIBUTIONS = ("keras", "keras-nightly")  # what PyPI names the Keras 3 package; one is installed
ALLOWED = "2.12 .. 2.21 (newest patch of each), next (" + RELEASES[NEXT] + ")"
_VERSION = re.compile(r"([0-9]+\.[0-9]+)(?:\.[0-9]+(?:rc[0-9]+|\.post[0-9]+)?)?")


def keras_release_key(keras: str) -> tuple[int, int]:
    """Order of Keras releases, nightly last."""
    return (99, 0) if keras == "nightly" else minor_key(keras)


def keras_canonical(raw: str) -> str | None:
    """KERAS's value as the lab keeps it: a family (keras3, tf-keras, bundled), a Keras minor line
    (3.15; or the exact release its locks pin, 3.15.1), nightly, or None where there is no such."""
    if raw in KERAS_CHOICES or raw == "nightly":
        return raw
    for minor, pinned in KERAS_RELEASES.items():
        if raw in (minor, pinned):
            return minor
    return None


def is_keras_release(keras: str) -> bool:
    """KERAS names a Keras release (3.15, nightly), not a family."""
    return keras in KERAS_RELEASES


def keras_label(keras: str) -> str:
    """How the lab names a KERAS value to a person: tf-keras, 3.15 (3.15.1), nightly (3.16.0.dev2026102704,
    2026-10-27)."""
    if keras == "nightly":
        return f"nightly ({KERAS_RELEASES[keras]}, {NIGHTLY_DATE})"
    return f"{keras} ({KERAS_RELEASES[keras]})" if keras in KERAS_RELEASES else keras


KERAS_ALLOWED = " | ".join(KERAS_CHOICES) + " | a Keras release: " + " ".join(KERAS_RELEASES)


def minor_key(minor: str) -> tuple[int, int]:
    major, _, rest = minor.partition(".")
    return int(major), int(rest)


def canonical(raw: str) -> str | None:
    """TF's value as the lab keeps it ("2.15", "2.22"), or None where there is no such version:
    next, a minor line, or the exact release its lock file pins (2.15.1, 2.22.0rc0)."""
    if raw == "next":
        return NEXT
    match = _VERSION.fullmatch(raw)
    if not match or match.group(1) not in RELEASES:
        return None
    minor = match.group(1)
    return minor if raw in (minor, RELEASES[minor]) else None


def release(tf: str) -> str:
    """The exact tensorflow-cpu release of a TF value (empty: the lab's own, 2.21)."""
    return RELEASES[tf or DEFAULT]


def label(tf: str) -> str:
    """How the lab names a TF value to a person: 2.15, or next (2.22.0rc0)."""
    tf = tf or DEFAULT
    return f"next ({RELEASES[tf]})" if tf == NEXT else tf


def kerases(tf: str) -> tuple[str, ...]:
    """The Keras families a TF line can have (a Keras release goes wherever keras3 does)."""
    tf = tf or DEFAULT
    own = ("keras3",) if minor_key(tf) >= minor_key(KERAS_3_FROM) else ("bundled",)
    return (*own, "tf-keras") if tf in TF_KERAS else own


def keras_for(tf: str, keras: str) -> str:
    """KERAS as it will be: the given one, or the default for the line (tf-keras where it exists
    from 2.16 on, else what tf.keras is)."""
    if keras:
        return keras
    tf = tf or DEFAULT
    return "tf-keras" if tf in TF_KERAS and minor_key(tf) >= minor_key(KERAS_3_FROM) else kerases(tf)[0]


def keras3_release(tf: str, keras: str) -> str | None:
    """The Keras 3 release a TF and KERAS run, as KERAS_RELEASES names it (3.15, nightly), or None
    where tf.keras is not Keras 3 (tf-keras, bundled): KERAS=keras3 (or empty, where that is
    keras3) is what the TF line's lock pins."""
    resolved = keras_for(tf, keras)
    if is_keras_release(resolved):
        return resolved
    if resolved != "keras3":
        return None
    return "nightly" if (tf or DEFAULT) == NEXT else KERAS_3_OF_THE_LINES


def keras_refusal(tf: str, keras: str) -> str | None:
    """Why this TF line cannot have this KERAS (a reason a person can act on), or None."""
    if not keras or keras in kerases(tf) or (is_keras_release(keras) and "keras3" in kerases(tf)):
        return None
    allowed = " or ".join(kerases(tf)) + (" or a Keras release" if "keras3" in kerases(tf) else "")
    if is_keras_release(keras):
        return (f"KERAS={keras} is not allowed with TF={label(tf)}: its tf.keras is the bundled Keras 2, and a Keras 3 "
                f"release runs as tf.keras from TF {KERAS_3_FROM} on; allowed: {allowed}")
    why = {"keras3": f"its tf.keras is the bundled Keras 2 (Keras 3 is tf.keras from TF {KERAS_3_FROM} on)",
           "bundled": f"it bundles no Keras 2 (tf.keras is Keras 3 from TF {KERAS_3_FROM} on; tf-keras is Keras 2)",
           "tf-keras": f"PyPI has no tf-keras for it (tf-keras {min(TF_KERAS, key=minor_key)} to "
                       f"{max(TF_KERAS, key=minor_key)} only)"}[keras]
    return f"KERAS={keras} is not allowed with TF={label(tf)}: {why}; allowed: {allowed}"


def legacy_keras_env(tf: str, keras: str) -> dict[str, str]:
    """The environment every task of a run gets for its Keras: TF_USE_LEGACY_KERAS=1 for tf-keras."""
    (name, _), = task.LEGACY_KERAS.items()
    return {name: "1" if keras_for(tf, keras) == "tf-keras" else "0"}
