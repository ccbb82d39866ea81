"""Parsers: pure functions from a tool's text to frozen dataclasses.

Every parser takes the text a tool printed (or the files it read) and returns typed facts. None
runs a command or touches the file system. On input it cannot understand a parser raises
`ParseError`, naming the tool and what was unexpected; the checks turn that into an `error`
result for the node, so a garbled probe never crashes a run or passes silently.
"""

from __future__ import annotations


class ParseError(ValueError):
    """A tool's output could not be understood. `tool` names the parser's tool."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(f"{tool}: {message}")
        self.tool = tool
        self.reason = message
