"""`python -m tflab.launch`: the command every SCRIPT task runs (userscript.script_command), so
the name stays; the launcher itself is tflab/trainer/launch.py."""

import sys

from tflab.trainer.launch import main

if __name__ == "__main__":
    sys.exit(main())
