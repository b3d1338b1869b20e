"""The errors a user sees from the host side: str() is a single line, no traceback."""


class LabError(Exception):
    pass


class ForeignFile(LabError, ValueError):
    """A file of a run folder that the lab cannot read as its own; str() is one line naming it.
    Here, not in foreign.py, so that beneath.py (which refuses links with it) and foreign.py (which
    opens files through beneath.py) do not import each other."""
