"""`python -m tflab.train`: the trainer's command (task.COMMAND) in every backend, the image's CMD
and users' generated manifests, so the name stays; the trainer itself is tflab/trainer/train.py."""

import sys

from tflab.trainer.train import main

if __name__ == "__main__":
    sys.exit(main())
