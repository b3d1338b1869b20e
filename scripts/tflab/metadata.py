"""`python -m tflab.metadata`: the GCE metadata stand-in's command in a run's Compose override, so
the name stays; the server itself is tflab/trainer/metadata.py."""

import sys

from tflab.trainer.metadata import main

if __name__ == "__main__":
    sys.exit(main())
