"""`from tflab.callback import LabCallback`: the import users' scripts carry (docs/your-script.md),
so the name stays; the callback itself is tflab/trainer/callback.py."""

from tflab.trainer.callback import LabCallback

__all__ = ["LabCallback"]
