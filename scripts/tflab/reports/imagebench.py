"""The trainer image's own figures: what each build sends, what a code-only change costs, what
the image weighs and what in it weighs most, and what builds leave behind. Printed beside the
figures of the image before it was split in two (packages + code) and stripped:

    PYTHONPATH=scripts python3 -m tflab.reports.imagebench [RUNS]   # RUNS code-only rebuilds (default 3)

Figures, not assertions: the machine is shared and noisy; quote the median.
"""

from __future__ import annotations

import statistics
import sys
import time

from tflab import images
from tflab.engine import docker
from tflab.images import builder

# Measured on this lab's development machine (2 cores, Docker 20.10, fuse-overlayfs) at the commit
# before the split (cdf9171, 2026-12-03): one Dockerfile, the repository as its context.
BEFORE = {
    "context": "350 MB (705 MB with the arm64 wheels too): every wheelhouse on disk, sent by every build",
    "code_rebuild": "median 11.2 s (9.6-13.7) in turn with the split's 4.7 s, 20-28 s on a busier engine "
                    "(the code stage, then a COPY over 1.6 GB)",
    "image": "1.77 GB: base 169 MB, packages 1.60 GB (TensorFlow's C++ headers 287 MB, libclang 64 MB)",
    "files": "38,244 files in the image (every layer above them walks them all on fuse-overlayfs)",
    "leftovers": "2 untagged images per build (2.12 GB install stage, 170 MB code stage)",
}


def megabytes(count: float) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count / 1e3:.0f} kB"


def code_only_rebuild_seconds(trainer: images.Variant, packages: str) -> float:
    """Builds the trainer image on `packages` from a context whose code has one comment more, so
    the code layer alone is new, and times the build; its tag is removed after."""
    with builder.context(trainer.wheels.parent, {"Dockerfile": images.DOCKERFILE, "tflab": images.CODE}) as context:
        module = context / "tflab/__init__.py"
        text = module.read_text()
        module.unlink()  # a hard link to the checkout's own file: replaced, never appended to
        module.write_text(f"{text}# rebuild {time.time()}\n")
        tag = f"{images.REPOSITORY}:bench-rebuild"
        started = time.monotonic()
        images.docker_build(context / "Dockerfile", context, tag, {"PACKAGES_IMAGE": packages})
        seconds = time.monotonic() - started
    docker.image_remove(tag)
    return seconds


def leftovers() -> list[str]:
    """Untagged images that the lab's builds made (their label says so) left on the engine."""
    return docker.dangling_images(label="tflab.image")


def heaviest(tag: str, count: int = 6) -> str:
    """The largest folders of the image's packages and system, as du inside it says."""
    script = ("site=$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); "
              "du -sk $site/* /usr/lib /usr/share /usr/bin 2>/dev/null | sort -n | tail -n %d" % count)
    found = docker.run_isolated(tag, "sh", "-c", script, timeout=120)
    pairs = [line.split("\t") for line in found.stdout.splitlines() if "\t" in line]
    return ", ".join(f"{path.rsplit('/', 1)[-1]} {int(size) / 1e3:.0f} MB" for size, path in reversed(pairs))


def file_count(tag: str) -> int:
    found = docker.run_isolated(tag, "sh", "-c", "find / -xdev 2>/dev/null | wc -l", timeout=120)
    return int(found.stdout.strip() or 0)


def figures(runs: int = 3, base_image: str = "") -> list[str]:
    trainer = images.variant()
    tag = images.ensure_image(base_image, trainer)
    base = images.ensure_base(base_image, trainer.platform, trainer.platform)
    packages = images.packages_tag(trainer, images.existing_id(base))
    wheels = sum(wheel.stat().st_size for wheel in trainer.wheels.glob("*.whl"))
    code = sum(path.stat().st_size for path in images.CODE.rglob("*.py"))
    size = docker.image_size(tag)
    base_size = docker.image_size(base)
    left_before = leftovers()
    seconds = [code_only_rebuild_seconds(trainer, packages) for _ in range(runs)]
    left = [image for image in leftovers() if image not in left_before]
    now = {
        "context": f"packages build {megabytes(wheels + trainer.requirements.stat().st_size)} (its own wheels and "
                   f"pins, built once per base and pins), code build {megabytes(code)} (the code alone)",
        "code_rebuild": f"median {statistics.median(seconds):.1f} s of {runs} "
                        f"({', '.join(f'{s:.1f}' for s in seconds)}): one COPY over the packages",
        "image": f"{size / 1e9:.2f} GB: base {base_size / 1e6:.0f} MB, packages and code "
                 f"{(size - base_size) / 1e9:.2f} GB; heaviest: {heaviest(tag)}",
        "files": f"{file_count(tag):,} files in the image",
        "leftovers": f"{len(left)} untagged images left by {runs} rebuilds"
                     f" ({builder.__name__.split('.')[-1]}: {'BuildKit' if builder.buildkit() else 'legacy builder'})",
    }
    names = {"context": "build context", "code_rebuild": "code-only rebuild", "image": "trainer image",
             "files": "files", "leftovers": "leftovers"}
    return [f"{names[key]}:\n  before: {BEFORE[key]}\n  now:    {now[key]}" for key in names]


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print("\n".join(figures(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
