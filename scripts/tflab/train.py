"""`python -m tflab.train`: the trainer's command (task.COMMAND) in every backend, the image's CMD
and users' generated manifests, so the name stays; the trainer itself is tflab/trainer/train.py."""

from tflab.trainer.signals import exit_now
from tflab.trainer.train import main

if __name__ == "__main__":
    exit_now(main())  # not sys.exit: TensorFlow's teardown can wait forever on a peer that left
