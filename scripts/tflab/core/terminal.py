"""A stream of a program's output cut into the lines a terminal would show (TerminalLines).

Shared: the launcher folds a SCRIPT's output with it inside its container (trainer/launch.py), and
the host folds a TFJob replica's with it (replay/stack.py), whose image runs no launcher of the
lab's; so both kinds of run leave the same lines in `<task>.out` and output.log. Stdlib only.
"""

from __future__ import annotations

import re
import time


class TerminalLines:
    """A stream cut into the lines a terminal would show: `\\r` returns to the line's start and `\\b`
    steps back, and what follows overwrites (Keras's progress bar redraws itself so, every step).
    A line is said at its line break; a line being redrawn is also said as it stands every
    PROGRESS_SECONDS, so a long epoch is not silent. Each line is said once, whole, so every line of
    output.log keeps its task and holds what the script printed: a plain print is never said in
    pieces (a print arrives as two writes, its text and then its line break, and a quiet spell
    before it must not make it two lines), and a redrawn line whose last drawing was said as it
    stands is not said again at its break."""

    PROGRESS_SECONDS = 10.0
    PIECES = re.compile(r"(\r\n|[\r\n\b])")
    COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # SGR: Keras 3's bold and green; a terminal shows no codes

    def __init__(self, say, clock=time.monotonic):
        self.say, self.clock = say, clock
        self.chars: list[str] = []
        self.column = 0
        self.redrawn = False  # this line has had a \r or \b: a progress bar, said as it stands
        self.said_as_it_stands: str | None = None  # this line's drawing last said before its break
        self.last_said = clock()

    def feed(self, text: str) -> None:
        for piece in self.PIECES.split(self.COLOURS.sub("", text)):
            if piece in ("\n", "\r\n"):
                self._say()
            elif piece == "\r":
                self.column, self.redrawn = 0, True
            elif piece == "\b":
                self.column, self.redrawn = max(0, self.column - 1), True
            elif piece:
                self.chars[self.column:self.column + len(piece)] = piece
                self.column += len(piece)
        if self.redrawn and self.chars and self.clock() - self.last_said >= self.PROGRESS_SECONDS:
            line = "".join(self.chars).rstrip()
            if line != self.said_as_it_stands:
                self.say(line)  # the line as it stands; it goes on being redrawn
                self.said_as_it_stands = line
            self.last_said = self.clock()

    def _say(self) -> None:
        line = "".join(self.chars).rstrip()
        if line != self.said_as_it_stands:
            self.say(line)
        self.chars, self.column, self.redrawn, self.said_as_it_stands = [], 0, False, None
        self.last_said = self.clock()

    def close(self) -> None:
        if self.chars:
            self._say()
