"""TF= and KERAS=: the grammar of versions and Keras, one line for what cannot be, the lock file of
every version (tested like requirements/trainer.txt's pins), and the image each version gets."""

import re

import pytest
from tflab import images
from tflab.backends.compose import render_run
from tflab.core import versions
from tflab.core.cluster import build
from tflab.core.settings import Settings, SettingsError
from tflab.images import record
from tflab.tools import lock

pytestmark = pytest.mark.unit
PIN = re.compile(r"([a-z0-9][a-z0-9-]*)==([0-9][0-9a-z.]*) --hash=sha256:([0-9a-f]{64})")


@pytest.mark.parametrize("raw, kept", [("2.15", "2.15"), ("2.15.1", "2.15"), ("next", "2.22"), ("2.22.0rc0", "2.22"),
                                       ("2.12", "2.12"), ("2.21", "2.21"), ("2.15 2.15.1", "2.15"),
                                       ("2.15 2.18 2.21 next", "2.15 2.18 2.21 2.22")])
def test_a_version_is_kept_as_its_minor_line(raw, kept):
    assert Settings.from_env({"TF": raw}).tf == kept
    assert Settings.from_dict({"tf": kept}).tf == kept  # what config.json holds reads back


@pytest.mark.parametrize("raw", ["2.11", "2.23", "3.0", "2.15.0", "2", "latest", "2.15,2.18", "2.x"])
def test_a_version_that_does_not_exist_is_one_line_naming_what_is_allowed(raw):
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"TF": raw})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"TF={raw} is not allowed: ")
    assert "2.12 .. 2.21" in message and "next (2.22.0rc0)" in message


@pytest.mark.parametrize("tf, keras, allowed", [
    ("2.15", "keras3", "allowed: bundled or tf-keras"), ("2.12", "tf-keras", "allowed: bundled"),
    ("2.21", "bundled", "allowed: keras3 or tf-keras or a Keras release"),
    ("next", "tf-keras", "allowed: keras3 or a Keras release"),
    ("", "bundled", "allowed: keras3 or tf-keras or a Keras release"),
    ("2.15", "3.12", "allowed: bundled or tf-keras"), ("2.12", "nightly", "allowed: bundled")])
def test_a_keras_a_version_cannot_have_is_one_line_naming_what_it_can(tf, keras, allowed):
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"TF": tf, "KERAS": keras})
    assert str(error.value).startswith(f"KERAS={keras} is not allowed with TF=") and str(error.value).endswith(allowed)


def test_the_keras_each_version_has_and_its_default():
    assert versions.kerases("2.13") == ("bundled",) and versions.kerases("2.15") == ("bundled", "tf-keras")
    assert versions.kerases("2.16") == ("keras3", "tf-keras") and versions.kerases("2.22") == ("keras3",)
    assert [versions.keras_for(tf, "") for tf in ("2.12", "2.15", "2.16", "", "2.22")] == [
        "bundled", "bundled", "tf-keras", "tf-keras", "keras3"]
    assert versions.legacy_keras_env("2.21", "keras3") == {"TF_USE_LEGACY_KERAS": "0"}
    assert versions.legacy_keras_env("2.21", "") == {"TF_USE_LEGACY_KERAS": "1"}
    assert versions.legacy_keras_env("2.15", "") == {"TF_USE_LEGACY_KERAS": "0"}  # bundled: tf.keras is keras


@pytest.mark.parametrize("given, refused", [
    ({"TF": "2.15", "BACKEND": "local"}, "TF=2.15 is not allowed with BACKEND=local"),
    ({"KERAS": "keras3", "BACKEND": "swarm"}, "KERAS=keras3 is not allowed with BACKEND=swarm"),
    ({"TF": "2.15", "GPUS": "all"}, "TF=2.15 is not allowed with GPUS"),
    ({"KERAS": "keras4"}, "KERAS=keras4 is not allowed: keras4 is not one of keras3 | tf-keras | bundled"),
    ({"KERAS": "3.9"}, "KERAS=3.9 is not allowed: 3.9 is not one of keras3 | tf-keras | bundled | a Keras release: "
                       "3.10 3.11 3.12 3.13 3.14 3.15 nightly"),
    ({"KERAS": "3.15.0"}, "KERAS=3.15.0 is not allowed: 3.15.0 is not one of"),  # a release the locks do not pin
    ({"KERAS": "3.12", "GPUS": "all"}, "KERAS=3.12 is not allowed with GPUS or PLATFORM=linux/arm64"),
    ({"STRATEGIES": "mirrored parameter_server"}, "STRATEGIES=mirrored parameter_server is not allowed"),
])
def test_what_a_version_cannot_go_with(given, refused):
    with pytest.raises(SettingsError, match=re.escape(refused)):
        Settings.from_env(given)


def test_each_version_gets_its_own_image_wheelhouse_and_lock_file_and_the_labs_own_stays():
    old = images.trainer_variant(Settings(tf="2.15"))
    assert (old.name, old.requirements, old.wheels) == (
        "cpu-tf2.15", images.REPO / "requirements/tf/2.15.txt", images.REPO / "images/trainer/wheels-tf2.15")
    assert images.image_tag(old, "sha256:base").startswith("tflab-trainer:cpu-tf2.15-")
    assert images.packages_tag(old, "sha256:base").startswith("tflab-trainer-packages:cpu-tf2.15-")
    assert images.tf_variant("2.21") == images.tf_variant("") == images.variant()  # the lab's own image
    assert images.image_tag(images.tf_variant("2.16"), "b") != images.image_tag(images.tf_variant("2.17"), "b")
    assert {variant.name for variant in images.tf_variants()} == {
        f"cpu-tf{tf}" for tf in versions.RELEASES if tf != "2.21"}


def test_a_list_of_versions_is_for_the_matrix_only():
    with pytest.raises(Exception, match=r"TF=2.15 2.18 is not allowed for one run: expected one value"):
        images.trainer_variant(Settings.from_env({"TF": "2.15 2.18"}))
    with pytest.raises(Exception, match=r"KERAS=tf-keras keras3 is not allowed for one run"):
        images.trainer_variant(Settings.from_env({"TF": "2.18", "KERAS": "tf-keras keras3"}))


def test_keras3_reaches_every_task_of_a_run_and_the_default_adds_nothing():
    for strategy in ("mirrored", "multiworker"):
        settings = Settings(strategy=strategy, tf="2.21", keras="keras3")
        services = render_run(settings, build(settings))["services"]
        assert services and all(s["environment"]["TF_USE_LEGACY_KERAS"] == "0" for s in services.values())
        default = render_run(settings.replace(keras=""), build(settings))["services"]
        assert not any("TF_USE_LEGACY_KERAS" in s.get("environment", {}) for s in default.values())


def pins(path) -> dict[str, tuple[str, str]]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    found = {}
    for line in lines:
        match = PIN.fullmatch(line)
        assert match, f"{path.name}: {line!r} is not name==version --hash=sha256:<64 hex>"
        assert match.group(1) not in found, f"{path.name}: {match.group(1)} pinned twice"
        found[match.group(1)] = match.group(2), match.group(3)
    return found


@pytest.mark.parametrize("tf", [tf for tf in versions.RELEASES if tf != versions.DEFAULT])
def test_every_version_has_its_lock_file_pinned_and_hashed(tf):
    path = lock.lock_path(tf)
    assert path == images.tf_variant(tf).requirements and path.is_file()
    found = pins(path)
    assert found["tensorflow-cpu"][0] == versions.RELEASES[tf]
    assert "tensorflow" not in found  # one TensorFlow: tf-keras's dependency is left out (--no-deps)
    assert ("tf-keras" in found) == (tf in versions.TF_KERAS)
    if tf in versions.TF_KERAS:
        assert found["tf-keras"][0] == versions.TF_KERAS[tf]
    keras = found["keras-nightly" if tf == versions.NEXT else "keras"][0]  # the pre-release asks for nightly
    assert keras.startswith("3.") if versions.minor_key(tf) >= (2, 16) else keras.startswith(tf)
    numpy = int(found["numpy"][0].split(".")[0])
    assert numpy == (1 if versions.minor_key(tf) <= (2, 17) else 2)  # numpy 2 from TF 2.18 on
    # The constraints a script's requirements are downloaded with carry no hash (pip refuses them there).
    assert "--hash" not in images.script_constraints(path.read_text())


def test_the_lock_tool_refuses_what_has_no_lock_file_of_its_own(capsys):
    assert lock.main(["2.21"]) == 2 and lock.main(["2.11"]) == 2
    assert "2.21 is requirements/trainer.txt" in capsys.readouterr().err


def test_make_clean_takes_every_versions_images_and_wheelhouse_and_no_other(monkeypatch, tmp_path):
    """The per-version images are the lab's own (recorded as it builds them), removed by `make clean`
    trainer before packages, and each version's wheelhouse goes with them."""
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    for name in ("WHEELS", "GPU_WHEELS", "ARM64_WHEELS"):
        monkeypatch.setattr(images, name, tmp_path / name.lower())
    for name, wheels in (("WHEEL_STAMP", "WHEELS"), ("GPU_WHEEL_STAMP", "GPU_WHEELS"),
                         ("ARM64_WHEEL_STAMP", "ARM64_WHEELS")):
        monkeypatch.setattr(images, name, tmp_path / wheels.lower() / ".pins-sha256")
    monkeypatch.setattr(images, "TF_WHEELS", tmp_path)
    old = images.tf_variant("2.15")
    old.wheels.mkdir()
    (old.wheels / "tensorflow_cpu-2.15.1-cp311-cp311-manylinux_2_17_x86_64.whl").write_text("w")
    old.stamp.write_text("pins\n")
    for tag in ("tflab-trainer-packages:cpu-0123456789ab", "tflab-trainer:cpu-aaaaaaaaaaaa",
                "tflab-trainer-packages:cpu-tf2.15-0123456789ab", "tflab-trainer:cpu-tf2.15-bbbbbbbbbbbb"):
        record.record_built(tag)
    assert record.removal_order() == ["tflab-trainer:cpu-aaaaaaaaaaaa", "tflab-trainer:cpu-tf2.15-bbbbbbbbbbbb",
                                      "tflab-trainer-packages:cpu-0123456789ab",
                                      "tflab-trainer-packages:cpu-tf2.15-0123456789ab"]
    removed = []
    monkeypatch.setattr(images, "remove_built", lambda: removed.extend(record.removal_order()))
    images.remove_rebuildable()
    assert len(removed) == 4 and not list(old.wheels.glob("*.whl")) and not old.stamp.exists()


# KERAS=<release>: the grammar, one lock per TF x release (tools/lock.py --keras), the thin layer.
from tflab.images import keraslock  # noqa: E402

KERAS_LINES = [tf for tf in versions.RELEASES if "keras3" in versions.kerases(tf)]  # 2.16 .. 2.22


@pytest.mark.parametrize("raw, kept", [("3.12", "3.12"), ("3.12.4", "3.12"), ("nightly", "nightly"),
                                       ("3.16.0.dev2026102704", "nightly"), ("3.15 tf-keras 3.15.1", "3.15 tf-keras")])
def test_a_keras_release_is_kept_as_its_minor_line(raw, kept):
    assert Settings.from_env({"KERAS": raw}).keras == kept
    assert Settings.from_dict({"keras": kept}).keras == kept


def test_a_keras_release_is_labelled_with_its_pin_and_the_nightly_with_its_date():
    assert versions.keras_label("3.12") == "3.12 (3.12.4)" and versions.keras_label("tf-keras") == "tf-keras"
    assert versions.keras_label("nightly") == "nightly (3.16.0.dev2026102704, 2026-10-27)"
    assert versions.KERAS_RELEASES["nightly"].split(".dev")[1][:8] == versions.NIGHTLY_DATE.replace("-", "")
    assert sorted(["nightly", "3.15", "3.10", "3.12"], key=versions.keras_release_key) == ["3.10", "3.12", "3.15",
                                                                                           "nightly"]
    assert versions.legacy_keras_env("2.21", "3.12") == {"TF_USE_LEGACY_KERAS": "0"}  # tf.keras is that release


@pytest.mark.parametrize("tf", KERAS_LINES)
@pytest.mark.parametrize("keras", list(versions.KERAS_RELEASES))
def test_every_keras_release_on_every_keras3_line_has_its_lock(tf, keras):
    """Installable: pinned, hashed, only the release's own package moved or added, and the TF line's
    Keras package removed first unless it is this very release. Or pip's reason."""
    lock = keraslock.read(tf, keras)
    assert lock.parent == (images.REQUIREMENTS if tf == versions.DEFAULT else images.tf_variant(tf).requirements)
    if lock.not_installable:
        assert "keras" in lock.not_installable and not lock.pins
        return
    found = pins(lock.path)
    distribution = "keras-nightly" if keras == "nightly" else "keras"
    parent = lock_tool_pins(lock.parent)
    if parent.get(distribution) == versions.KERAS_RELEASES[keras]:
        assert lock.empty  # the line has it already: its own image
        return
    assert found[distribution][0] == versions.KERAS_RELEASES[keras]
    assert "tensorflow-cpu" not in found and "tensorflow" not in found  # TensorFlow is never touched
    assert set(lock.removes) == {name for name in versions.KERAS_DISTRIBUTIONS if name in parent}


def lock_tool_pins(path):
    from tflab.tools import lock as tool

    return tool.parent_pins(path)


def test_tf_2_21_cannot_have_keras_3_10_and_says_why_in_pips_words():
    with pytest.raises(Exception, match=re.escape("TF=2.21 KERAS=3.10 is not installable: pip says: The user "
                                                  "requested keras==3.10.0; tensorflow-cpu 2.21.0 depends on "
                                                  "keras>=3.12.0")):
        images.trainer_variant(Settings.from_env({"KERAS": "3.10"}))


def test_a_keras_release_is_a_thin_layer_on_its_tf_lines_image():
    nightly = images.trainer_variant(Settings(keras="nightly"))
    assert (nightly.name, nightly.parent, nightly.requirements) == (
        "cpu-kerasnightly", images.variant(), images.REPO / "requirements/keras/2.21-nightly.txt")
    assert nightly.wheels == images.REPO / "images/trainer/wheels-cpu-kerasnightly"
    assert images.packages_tag(nightly, "b").startswith("tflab-trainer-packages:cpu-kerasnightly-")
    assert images.image_tag(nightly, "b").startswith("tflab-trainer:cpu-kerasnightly-")
    older = images.trainer_variant(Settings(tf="2.18", keras="3.12"))
    assert (older.name, older.parent) == ("cpu-tf2.18-keras3.12", images.tf_variant("2.18"))
    # Its inputs are its parent's and its own: a new TF lock is a new layer.
    assert images.packages_inputs(older.requirements, older.parent) == [
        images.INSTALL_SCRIPT, images.tf_variant("2.18").requirements, images.KERAS_INSTALL_SCRIPT,
        older.requirements]
    assert images.trainer_variant(Settings(keras="3.15")) == images.variant()  # 2.21 has 3.15.1 already


def test_make_clean_removes_keras_layers_before_the_packages_they_are_built_on(monkeypatch, tmp_path):
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    for tag in ("tflab-trainer-packages:cpu-0123456789ab", "tflab-trainer-packages:cpu-kerasnightly-0123456789ab",
                "tflab-trainer:cpu-kerasnightly-aaaaaaaaaaaa"):
        record.record_built(tag)
    assert record.removal_order() == ["tflab-trainer:cpu-kerasnightly-aaaaaaaaaaaa",
                                      "tflab-trainer-packages:cpu-kerasnightly-0123456789ab",
                                      "tflab-trainer-packages:cpu-0123456789ab"]


@pytest.fixture
def lock_home(monkeypatch, tmp_path):
    """keraslock with its files in tmp_path: requirements/trainer.txt and requirements/keras/."""
    monkeypatch.setattr(keraslock, "LAB_HOME", tmp_path)
    monkeypatch.setattr(keraslock, "KERAS_LOCKS", tmp_path / "requirements/keras")
    (tmp_path / "requirements/keras").mkdir(parents=True)
    parent = tmp_path / "requirements/trainer.txt"
    parent.write_text("keras==3.15.1\ntensorflow-cpu==2.21.0\n")
    return tmp_path, f"# layers on: requirements/trainer.txt sha256:{keraslock.sha256(parent)}\n"


KERAS_PIN = "keras==3.12.4 --hash=sha256:" + "a" * 64 + "\n"


@pytest.mark.parametrize("text, said", [
    (None, "has no lock file (requirements/keras/2.21-3.12.txt); write it with: PYTHONPATH=scripts python3 -m "
           "tflab.tools.lock --keras 3.12 2.21"),
    (KERAS_PIN, "does not say it layers on requirements/trainer.txt"),
    ("# layers on: requirements/trainer.txt sha256:" + "0" * 64 + "\n" + KERAS_PIN,
     "was locked against another requirements/trainer.txt than this one; lock it again"),
    ("{layers}# removes: keras;rm\n" + KERAS_PIN, "line 2 names something that is not a Keras package"),
    ("{layers}# removes: numpy\n" + KERAS_PIN, "line 2 names something that is not a Keras package"),
    ("{layers}keras>=3.12\n", "line 2 is not name==version --hash=sha256:<64 hex digits>"),
    ("{layers}# not installable: \x1b[31mred\n", "line 2 gives no reason on one line"),
    ("{layers}# not installable: no\n" + KERAS_PIN, "it both installs and says it cannot"),
    ("{layers}# caf\u00e9\n", "not ASCII"),
    ("{layers}" + "#" * 70000, "over 65536 bytes"),
])
def test_a_lock_the_lab_did_not_write_or_that_is_stale_is_one_line(lock_home, text, said):
    home, layers = lock_home
    if text is not None:
        (home / "requirements/keras/2.21-3.12.txt").write_text(text.replace("{layers}", layers))
    with pytest.raises(keraslock.LockError) as error:
        keraslock.read("2.21", "3.12")
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_lock_tool_keeps_what_differs_and_what_pip_said(lock_home):
    from tflab.tools import lock as tool

    home, _ = lock_home
    parent = home / "requirements/trainer.txt"
    resolved = [("keras", "3.12.4", "a" * 64), ("tensorflow-cpu", "2.21.0", "b" * 64), ("namex", "0.1.0", "c" * 64)]
    lines = tool.keras_lines("2.21", "3.12", resolved, None, parent)
    assert lines[-3:] == ["# removes: keras", "keras==3.12.4 --hash=sha256:" + "a" * 64,
                          "namex==0.1.0 --hash=sha256:" + "c" * 64]
    (home / "requirements/keras/2.21-3.12.txt").write_text("\n".join(lines) + "\n")
    lock = keraslock.read("2.21", "3.12")
    assert lock.removes == ("keras",) and len(lock.pins) == 2 and not lock.not_installable
    same = tool.keras_lines("2.21", "3.15", [("keras", "3.15.1", "a" * 64)], None, parent)
    assert not any(line.startswith(("# removes", "keras==")) for line in same)  # the line has it: no layer
    refused = tool.keras_lines("2.21", "3.10", None, "tensorflow-cpu 2.21.0 depends on keras>=3.12.0", parent)
    assert refused[-1] == "# not installable: tensorflow-cpu 2.21.0 depends on keras>=3.12.0"


def test_pips_reason_is_the_conflict_it_names_on_one_line():
    from tflab.tools import lock as tool

    output = ("Collecting keras==3.10.0\nERROR: Cannot install keras==3.10.0 and tensorflow-cpu==2.21.0 because these "
              "package versions have conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested "
              "keras==3.10.0\n    tensorflow-cpu 2.21.0 depends on keras>=3.12.0\n\nTo fix this you could try to:\n")
    assert tool.pip_reason(output) == ("The user requested keras==3.10.0; tensorflow-cpu 2.21.0 depends on "
                                       "keras>=3.12.0")
    assert tool.pip_reason("ERROR: No matching distribution found for keras==9\n") == \
        "No matching distribution found for keras==9"
