"""`stetho --help` laid out without importing click.

Importing click costs about four times starting Python itself, so the one page a user reads
before any command runs is drawn here from stetho.cli's tables, the way click's HelpFormatter
draws it (terminal width capped at 80, the same wrapping, `\\b` blocks kept as written, the
same two-column lists). tests/test_cli_lazy.py holds the two to the same text at several widths;
anything else (`stetho CMD --help`, a usage error) goes through click itself.
"""

from __future__ import annotations

import textwrap

from stetho.configsource import terminal_columns

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

#: The group's own options, as click lists them.
OPTIONS = (("--version", "Show the version and exit."),
           ("-h, --help", "Show this message and exit."))
USAGE_ARGS = "[OPTIONS] COMMAND [ARGS]..."


def render(prog: str, help_text: str, commands: Sequence[tuple[str, str]]) -> str:
    """The whole page (no trailing newline, as click's get_help): usage, the group's help,
    its options, and each command with its help line shortened to fit."""
    width = max(min(terminal_columns(), 80) - 2, 50)
    out = [_wrap(USAGE_ARGS, width, f"Usage: {prog} ", " " * len(f"Usage: {prog} ")), "\n"]
    text = cleandoc(help_text).partition("\f")[0]
    if text:
        out += ["\n", _wrap(text, width, "  ", "  ", paragraphs=True), "\n"]
    out += ["\nOptions:\n", *_dl(OPTIONS, width)]
    limit = width - 6 - max(len(n) for n, _ in commands)
    out += ["\nCommands:\n", *_dl([(n, short(h, limit)) for n, h in commands], width)]
    return "".join(out).rstrip("\n")


def cleandoc(doc: str) -> str:
    """inspect.cleandoc without importing inspect: the first line stripped, the rest
    dedented by their common indent, blank lines at either end dropped."""
    lines = doc.expandtabs().split("\n")
    indents = [len(ln) - len(ln.lstrip()) for ln in lines[1:] if ln.strip()]
    margin = min(indents) if indents else 0
    lines = [lines[0].lstrip()] + [ln[margin:] for ln in lines[1:]]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def short(help_line: str, limit: int) -> str:
    """A command's help cut to its first sentence, then to `limit` characters at a word with
    '...' (click 8.5's rule for a command's short help)."""
    words = help_line.partition("\n\n")[0].split()
    if words and words[0] == "\b":
        words = words[1:]
    if not words:
        return ""
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            words = words[:i + 1]
            break
    text = " ".join(words)
    if len(text) <= limit:
        return text
    if limit < 3:
        return "..."
    return textwrap.shorten(text, limit, placeholder="...", break_on_hyphens=False)


def _wrap(text: str, width: int, first: str, rest: str, paragraphs: bool = False) -> str:
    wrapper = textwrap.TextWrapper(width, initial_indent=first, subsequent_indent=rest,
                                   replace_whitespace=False)
    text = text.expandtabs()
    if not paragraphs:
        return wrapper.fill(text)
    blocks: list[tuple[int, bool, str]] = []
    buf: list[str] = []
    indent: int | None = None
    for line in [*text.splitlines(), ""]:
        if not line:
            if buf:
                raw = buf[0].strip() == "\b"
                blocks.append((indent or 0, raw, "\n".join(buf[1:]) if raw else " ".join(buf)))
                buf = []
            indent = None
            continue
        if indent is None:
            indent = len(line) - len(line.lstrip())
            line = line.lstrip()
        buf.append(line)
    done = []
    for extra, raw, body in blocks:
        pad = " " * extra
        if raw:
            lines = body.splitlines()
            done.append("\n".join((first if i == 0 else rest) + pad + ln
                                  for i, ln in enumerate(lines)))
        else:
            wrapper.initial_indent, wrapper.subsequent_indent = first + pad, rest + pad
            done.append(wrapper.fill(body))
    return "\n\n".join(done)


def _dl(rows: Sequence[tuple[str, str]], width: int, indent: int = 2) -> list[str]:
    first_col = min(max(len(a) for a, _ in rows), 30) + 2
    out = []
    for term, text in rows:
        out.append(" " * indent + term)
        if not text:
            out.append("\n")
            continue
        if len(term) <= first_col - 2:
            out.append(" " * (first_col - len(term)))
        else:
            out.append("\n" + " " * (first_col + indent))
        lines = _wrap(text, max(width - first_col - 2, 10), "", "",
                      paragraphs=True).splitlines()
        out.append((lines[0] if lines else "") + "\n")
        out += [" " * (first_col + indent) + ln + "\n" for ln in lines[1:]]
    return out
