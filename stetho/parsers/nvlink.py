"""nvidia-smi nvlink -s / -e parsers: which NVLinks are up, at what speed, and their error counters.

A link that trained down or went inactive, or whose replay/recovery/CRC counters climb, costs
collective bandwidth long before anything crashes. Both commands print a `GPU n: name (UUID: ..)`
header (no UUID on GB300) followed by indented `Link k: ...` lines; indents are tabs, spaces or a
mix, blank lines and `[...]` elisions (in excerpts) can fall between links.
"""

from __future__ import annotations

import re
from functools import lru_cache

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import is_na, require_text

TOOL_STATUS = "nvidia-smi nvlink -s"
TOOL_ERRORS = "nvidia-smi nvlink -e"


@record
class NvlinkLink:
    link: int
    speed_gbps: float | None  # GB/s as printed; None when inactive
    active: bool
    raw: str  # the value as printed: "25 GB/s", "<inactive>"


@record
class NvlinkGpu:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkLink, ...]  # empty when the GPU has no NVLink

    @property
    def inactive_links(self) -> tuple[int, ...]:
        return tuple(link.link for link in self.links if not link.active)


@record
class NvlinkLinkErrors:
    link: int
    counters: dict[str, int]  # {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}


@record
class NvlinkErrorsGpu:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkLinkErrors, ...]


_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_LINK = re.compile(r"^Link (?P<link>\d+): (?P<value>.*?)\s*$")
_SPEED = re.compile(r"^(?P<speed>\d+(?:\.\d+)?) GB/s$")
_COUNTER = re.compile(r"^(?P<name>[A-Za-z][\w ./-]*?): (?P<value>\S+)$")
# Indented lines under a GPU that say it has no usable NVLink rather than listing links.
_NO_NVLINK = re.compile(r"not supported|inactive|no nvlink|unable to", re.IGNORECASE)
_ELISION = re.compile(r"^\[\s*(?:\.\.\.|…)\s*\]$")
# `Link k: <counter>: <digits>`, the line nearly all of `-e` is: read in one match. Anything
# else (N/A, inactive, odd spacing, garbage) takes the general path, which says what is wrong.
_PLAIN_COUNTER = re.compile(r"Link (\d+): ([A-Za-z][\w ./-]*?): (\d+)\Z")
# The fast path: a text made only of `GPU n: ...` headers, blank lines and plain link lines
# (tab/space indents, `\n` line ends) is cut by one `split` into its lines' groups, with nothing
# between them, instead of a few regexes per line. A counter name has no colon, so the greedy
# name here ends where `_PLAIN_COUNTER`'s lazy one does. Any other text (and any header `_GPU`
# does not take) goes the general per-line path, so what either path returns or raises stays
# the same.
_FAST_HEADER = r"(GPU [^\n]*)\n"
_FAST_BLANK = r"[ \t]*\n"
_FAST_ERRORS_LINE = (_FAST_HEADER + r"|[ \t]+Link (\d+): ([A-Za-z][\w ./-]*): (\d+)[ \t]*\n|"
                     + _FAST_BLANK)
_FAST_STATUS_LINE = (_FAST_HEADER + r"|[ \t]+Link (\d+): ((\d+(?:\.\d+)?) GB/s|<inactive>)[ \t]*\n|"
                     + _FAST_BLANK)
_FAST_ERRORS = re.compile(_FAST_ERRORS_LINE)
_FAST_STATUS = re.compile(_FAST_STATUS_LINE)
_FAST_GPU_SPLIT = re.compile(r"^(GPU [^\n]*)\n", re.MULTILINE)


def _fast_text(text: str) -> str | None:
    """The text with a final newline, when the fast path may read it."""
    if "\r" in text:
        return None
    return text if text.endswith("\n") else text + "\n"


def _blocks(tool: str, text: str) -> list[tuple[re.Match[str], list[tuple[int, str]]]]:
    """Split into (GPU header match, [(line number, stripped indented line)]) blocks."""
    blocks: list[tuple[re.Match[str], list[tuple[int, str]]]] = []
    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        line = raw.strip()
        if not line or (line[0] == "[" and _ELISION.match(line)):
            continue
        header = _GPU.match(raw) if raw[:4] == "GPU " else None
        if header is not None:
            blocks.append((header, []))
        elif not blocks:
            raise ParseError(tool, f"line {number}: expected a 'GPU n: ...' header: {line[:80]!r}")
        elif raw[:1] not in (" ", "\t") and not _NO_NVLINK.search(line):
            raise ParseError(tool, f"line {number}: unexpected unindented line: {line[:80]!r}")
        else:
            blocks[-1][1].append((number, line))
    if not blocks:
        raise ParseError(tool, "no 'GPU n: ...' header found")
    return blocks


def _header(m: re.Match[str]) -> tuple[int, str, str | None]:
    return int(m.group("index")), m.group("name").strip(), m.group("uuid")


def _link_line(tool: str, number: int, line: str) -> re.Match[str] | None:
    """The `Link k: ...` match, None for a 'no NVLink' note; ParseError for anything else."""
    m = _LINK.match(line)
    if m is not None:
        return m
    if _NO_NVLINK.search(line):
        return None
    raise ParseError(tool, f"line {number}: not a 'Link n: ...' line: {line[:80]!r}")


def _fast_status(text: str) -> tuple[NvlinkGpu, ...] | None:
    """`parse_status` of a plain text, a GPU's block at a time; None when the general path must
    read it."""
    blocks = _fast_blocks(_fast_text(text))
    if blocks is None:
        return None
    gpus: list[NvlinkGpu] = []
    for header, block in blocks:
        links = _fast_status_block(block)
        if links is None:
            return None
        gpus.append(NvlinkGpu(*_header(header), links=links))
    return tuple(gpus)


def _fast_blocks(full: str | None) -> list[tuple[re.Match[str], str]] | None:
    """A plain text's GPUs as (header match, block of link lines); None when it is not plain."""
    if full is None:
        return None
    parts = _FAST_GPU_SPLIT.split(full)  # [before, header, block, header, block, ...]
    if len(parts) < 3 or parts[0].strip(" \t\n"):
        return None
    out = []
    for head, block in zip(parts[1::2], parts[2::2], strict=True):
        header = _GPU.match(head)
        if header is None:
            return None
        out.append((header, block))
    return out


# Every GPU of a healthy fleet prints the same block: read once. NvlinkLink is immutable
# (ints, floats, bools, strings), so the cached tuple itself is handed out.
@lru_cache(maxsize=256)
def _fast_status_block(block: str) -> tuple[NvlinkLink, ...] | None:
    """One GPU's link lines; None when not plain."""
    parts = _FAST_STATUS.split(block)
    if any(parts[::5]):  # text no fast-path line took
        return None
    links: list[NvlinkLink] = []
    try:
        for head, link, value, speed in zip(parts[1::5], parts[2::5], parts[3::5], parts[4::5],
                                                 strict=True):
            if head:
                return None
            if link:
                if speed:
                    links.append(NvlinkLink(int(link), float(speed), True, value))
                else:
                    links.append(NvlinkLink(int(link), None, False, value))
    except ValueError:
        return None
    return tuple(links)


def parse_status(data: str | bytes) -> tuple[NvlinkGpu, ...]:
    """Parse `nvidia-smi nvlink -s` (`--status`)."""
    text = require_text(TOOL_STATUS, data)
    fast = _fast_status(text)
    if fast is not None:
        return fast
    try:
        gpus = []
        for header, lines in _blocks(TOOL_STATUS, text):
            links = []
            for number, line in lines:
                m = _link_line(TOOL_STATUS, number, line)
                if m is None:
                    continue
                value = m.group("value")
                speed = _SPEED.match(value)
                if speed is not None:
                    links.append(NvlinkLink(int(m.group("link")), float(speed.group("speed")),
                                            True, value))
                elif "inactive" in value.lower() or is_na(value):
                    links.append(NvlinkLink(int(m.group("link")), None, False, value))
                else:
                    raise ParseError(TOOL_STATUS, f"line {number}: unknown link state {value!r}")
            gpus.append(NvlinkGpu(*_header(header), links=tuple(links)))
        return tuple(gpus)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ParseError(TOOL_STATUS, f"unexpected content: {exc}") from None


def _fast_errors(text: str) -> tuple[NvlinkErrorsGpu, ...] | None:
    """`parse_errors` of a plain text, a GPU's block at a time; None when the general path must
    read it."""
    full = _fast_text(text)
    # A counter whose name says inactive is read as an inactive link by the general path.
    blocks = None if full is None or "inactive" in full.lower() else _fast_blocks(full)
    if blocks is None:
        return None
    gpus: list[NvlinkErrorsGpu] = []
    for header, block in blocks:
        links = _fast_error_block(block)
        if links is None:
            return None
        gpus.append(NvlinkErrorsGpu(
            *_header(header),
            links=tuple(NvlinkLinkErrors(k, dict(v)) for k, v in links),
        ))
    return tuple(gpus)


# A healthy GPU's block (every counter 0) is the same text on every GPU of a fleet: read once.
# The cached counters are copied into each result, never handed out.
@lru_cache(maxsize=256)
def _fast_error_block(block: str) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...] | None:
    """One GPU's link lines as ((link, ((counter, count), ...)), ...); None when not plain."""
    parts = _FAST_ERRORS.split(block)
    if any(parts[::5]):  # text no fast-path line took
        return None
    links: dict[int, dict[str, int]] = {}
    try:
        for head, link, name, digits in zip(parts[1::5], parts[2::5], parts[3::5], parts[4::5],
                                                 strict=True):
            if head:
                return None
            if link:
                links.setdefault(int(link), {})[name] = int(digits)
    except ValueError:
        return None
    return tuple((k, tuple(v.items())) for k, v in links.items())


def parse_errors(data: str | bytes) -> tuple[NvlinkErrorsGpu, ...]:
    """Parse `nvidia-smi nvlink -e` (`--errorcounters`).

    N/A counters are left out; an inactive link is listed with no counters.
    """
    text = require_text(TOOL_ERRORS, data)
    fast = _fast_errors(text)
    if fast is not None:
        return fast
    try:
        gpus = []
        for header, lines in _blocks(TOOL_ERRORS, text):
            links: dict[int, dict[str, int]] = {}
            for number, line in lines:
                plain = _PLAIN_COUNTER.match(line)
                if plain is not None and "inactive" not in line.lower():
                    link, name, digits = plain.groups()
                    links.setdefault(int(link), {})[name] = int(digits)
                    continue
                m = _link_line(TOOL_ERRORS, number, line)
                if m is None:
                    continue
                if "inactive" in m.group("value").lower():
                    links.setdefault(int(m.group("link")), {})
                    continue
                counter = _COUNTER.match(m.group("value"))
                if counter is None:
                    raise ParseError(TOOL_ERRORS, f"line {number}: not a counter: {line[:80]!r}")
                counters = links.setdefault(int(m.group("link")), {})
                value = counter.group("value")
                if is_na(value):
                    continue
                if not value.isdigit():
                    raise ParseError(TOOL_ERRORS, f"line {number}: counter is not a number")
                counters[counter.group("name")] = int(value)
            gpus.append(NvlinkErrorsGpu(
                *_header(header),
                links=tuple(NvlinkLinkErrors(k, v) for k, v in links.items()),
            ))
        return tuple(gpus)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ParseError(TOOL_ERRORS, f"unexpected content: {exc}") from None
