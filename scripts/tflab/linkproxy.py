"""`python -m tflab.linkproxy`: the delay proxy's command in a run's Compose override, so the name
stays; the proxy itself is tflab/trainer/linkproxy.py."""

import sys

from tflab.trainer.linkproxy import main

if __name__ == "__main__":
    sys.exit(main())
