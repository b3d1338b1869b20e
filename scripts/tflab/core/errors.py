"""The one error type a user sees from the host side: str() is a single line, no traceback."""


class LabError(Exception):
    pass
