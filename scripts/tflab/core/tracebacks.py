"""A Python traceback read from a task's output or its `error` event: the exception it died of,
from the root cause of a chain of exceptions, trimmed to what a user reads at a glance.

    exception_head(output)   # "KeyError: 'labels'" (+ "\n  which led to ..." for a chain)
    chain_links(output)      # the last chain's tracebacks, its root cause first

Pure text. explain.py searches its signatures in each link and names an exception no signature
knows by its head; the launcher and a replica's summary take the head as a task's error. Shared
by the host side and the launcher inside the image: imports neither TensorFlow nor Docker.
"""

from __future__ import annotations

import re

TRACEBACK = "Traceback (most recent call last):"
# Where an exception's message ends: a blank line, a chained exception, or a log line.
MESSAGE_END = re.compile(r"^\s*$|^Traceback \(most recent|^During handling of|^The above exception|"
                         r"^[IWEF]\d{4} \d\d:\d\d|^\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b[^\n]*$|"
                            r"^[A-Za-z_][\w.]*: ")
HEAD_LINES = 4  # a longer message keeps these first lines and its last two
LINE_CHARS = 300


def exception_head(text: str) -> str:
    """The exception of the last traceback in `text` that caused the rest: where exceptions are
    chained ("During handling of the above exception", "The above exception was the direct cause"),
    the root cause's type, message and the message's continuation lines, trimmed (a TensorFlow
    message can print whole tensors, and the point is often its last line), then the last link's
    first line; '' if there is none."""
    links = chain_links(text)
    if not links:
        return ""
    root = _head(links[0])
    last = _head(links[-1]).splitlines()[:1] if len(links) > 1 else []
    if not root:
        return _head(links[-1])
    return root + (f"\n  which led to {last[0]}" if last else "")


def chain_links(text: str) -> list[str]:
    """The tracebacks of the last chain of exceptions in `text`, its root cause first; [] if none.
    Python prints a chain cause first, each later link after one of CHAINED's lines."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == TRACEBACK]
    if not starts:
        return []
    chain = [starts[-1]]
    for earlier in reversed(starts[:-1]):
        between = lines[earlier + 1:chain[0]]
        if not any(CHAINED.match(line) for line in between[-4:]):
            break
        chain.insert(0, earlier)
    ends = chain[1:] + [len(lines)]
    return ["\n".join(lines[start:end]) for start, end in zip(chain, ends)]


CHAINED = re.compile(r"^(?:During handling of the above exception, another exception occurred:|"
                     r"The above exception was the direct cause of the following exception:)\s*$")


def _head(traceback: str) -> str:
    """One traceback's final exception: its type, message and continuation lines, trimmed."""
    rest = traceback.splitlines()[1:]
    for i, line in enumerate(rest):
        if line[:1].isspace() or not line.strip():
            continue  # a frame, its source line, its ^^^^ markers
        if not EXCEPTION_LINE.match(line):
            return ""
        message = [line]
        for more in rest[i + 1:]:
            if MESSAGE_END.match(more):
                break
            message.append(more)
        if len(message) > HEAD_LINES + 2:
            message = message[:HEAD_LINES] + [f"  ... ({len(message) - HEAD_LINES - 2} lines)"] + message[-2:]
        return "\n".join(_trim(line.rstrip()) for line in message)
    return ""


def _trim(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 3] + "..."
