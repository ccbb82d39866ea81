"""Render a Diagnosis as its report, `<node>-<cause>-<id>.md` (Jinja2 over Markdown), and
its trend chart SVG.

The report is read by an on-call engineer in a git web UI and by a technician at the rack, and
it is parsed by the knowledge base (`stetho.publish.kb`) through its YAML front matter. Almost
all of its text comes from the node being diagnosed: log lines, messages, subjects, even the
node name. A node that is broken, or owned, must not be able to turn that text into live
Markdown or HTML (a script, a tracking image, a phishing link, a fake heading saying "root
cause: none"), nor into front matter that misfiles the report. So nothing from data reaches the
template unfiltered:

* `md`: inline text (table cells, prose, list items). Every character Markdown or HTML gives a
meaning to is backslash-escaped (``\\ ` * _ [ ] ( ) # + - ! | < > & ~ $``), as are the shapes
GitHub-flavoured renderers turn into links (``://``, ``www.``, ``@``), a leading ``=`` (setext
underline) and a leading ``12.`` (ordered list). Line breaks become spaces, so a value can
neither end its table row nor start a block. The text still reads the same once rendered. *
`md_block`: the same for multi-line prose (the fix), lines kept as hard line breaks. * `fence`:
log lines, commands and ticket text, verbatim in a fenced code block whose fence is longer than
the longest run of backticks inside, so no content line can close it. Fences are only ever
emitted at the top level of the document (never inside a list item), where a less indented line
cannot end the block early. * `yaml_value`: front matter scalars and lists. A value that reads
back as the same string when plain (``gpu-017``) stays plain; anything else is double-quoted
with every character YAML could misread escaped, so colons, quotes, brackets and newlines parse
as text. * `link`: links to earlier reports. Only http(s) URLs and relative paths become links;
the destination is percent-encoded and entity-proofed. Anything else is shown as inert text.

In all of them, control characters (a terminal escape in a kernel log line) are replaced by
their visible Unicode control pictures and bidirectional overrides by U+FFFD, so the file is
also safe to `cat` and cannot display text in an order other than it is stored.

Rendering is pure; `write()` is the only function here that touches the file system.
"""

from __future__ import annotations

import hashlib
import html
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template

from stetho.core import atomic
from stetho.core.resources import shipped
from stetho.diagnosis.model import Diagnosis
from stetho.diagnosis.svg import render_trend
from stetho.results import Result, format_value

TEMPLATE = "diagnosis-report.md.j2"

#: Characters escaped wherever they appear in inline text (see the module docstring).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]()#+\-!|<>&~$])")
#: Link shapes GitHub-flavoured Markdown turns into links even without brackets.
_AUTOLINK_SCHEME = re.compile(r"://")
_AUTOLINK_WWW = re.compile(r"(?i)\b(www)\.")
_AUTOLINK_EMAIL = re.compile("@")
_LEADING_ORDERED = re.compile(r"^(\d+)\.")
_NEWLINES = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029]")
#: C0 controls but tab, line feed and carriage return; DEL; C1 controls.
_CONTROL = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f\x80-\x9f]")
#: Bidirectional embedding, override and isolate controls ("Trojan Source").
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_BACKTICK_RUN = re.compile("`+")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_LINK_SAFE_CHARS = "/?#=%-._~!$'*+,;:@&"
_PLAIN_YAML = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_STEM_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
#: File names stay well under the 255-byte limit with "-trend.svg" appended.
_STEM_MAX = 200


def _visible(text: str) -> str:
    """Control characters as their Unicode control pictures (ESC shows as a visible symbol,
    not a terminal command), DEL and C1 controls as U+FFFD, bidi overrides as U+FFFD."""
    def picture(m: re.Match[str]) -> str:
        c = ord(m.group())
        if c < 0x20:
            return chr(0x2400 + c)
        return "\u2421" if c == 0x7F else "\ufffd"

    return _BIDI.sub("\ufffd", _CONTROL.sub(picture, text))


def _escape_line(line: str) -> str:
    """One line of inline text, every Markdown/HTML meaning neutralised (no line breaks in it)."""
    s = _MD_SPECIAL.sub(r"\\\1", _visible(line).strip())
    s = _AUTOLINK_SCHEME.sub(r"\\://", s)
    s = _AUTOLINK_WWW.sub(r"\1\\.", s)
    s = _AUTOLINK_EMAIL.sub(r"\\@", s)
    s = _LEADING_ORDERED.sub(r"\1\\.", s)
    if s.startswith("="):
        s = "\\" + s
    return s


def md(value: Any) -> str:
    """Inline text from data, inert in Markdown and HTML: the `md` filter. None is empty."""
    if value is None:
        return ""
    return _escape_line(_NEWLINES.sub(" ", str(value)))


def md_block(value: Any) -> str:
    """Multi-line prose from data, inert: lines kept as hard breaks, blank lines as paragraph
    breaks. Each line is escaped as `md` escapes it, so none can open a block."""
    if value is None:
        return ""
    paragraphs: list[list[str]] = [[]]
    for line in _NEWLINES.split(str(value)):
        escaped = _escape_line(line)
        if escaped:
            paragraphs[-1].append(escaped)
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join("\\\n".join(p) for p in paragraphs if p)


def fence(value: Any, info: str = "") -> str:
    """A fenced code block holding `value` (a string or a sequence of lines) verbatim but for
    control characters, made visible: the fence is one backtick longer than the longest
    backtick run inside (at least three), so nothing inside can close it. Emit it at the top
    level only: inside a list item, a content line indented less would end the block."""
    items = [value] if isinstance(value, str) else list(value or ())
    lines = [_visible(part) for item in items for part in _NEWLINES.split(str(item))]
    longest = max((len(m.group()) for ln in lines for m in _BACKTICK_RUN.finditer(ln)),
                  default=0)
    bar = "`" * max(3, longest + 1)
    return "\n".join([bar + info, *lines, bar])


def _yaml_scalar(value: Any) -> str:
    s = "" if value is None else str(value)
    if _PLAIN_YAML.fullmatch(s) and yaml.safe_load(s) == s:
        return s  # reads back as the same string: ids, node names, rule ids stay readable
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= c <= 0x7E or (0xA0 <= c <= 0xFFFD and not 0xD800 <= c <= 0xDFFF
                                   and c not in (0x2028, 0x2029, 0xFEFF)
                                   and not _BIDI.match(ch)):
            out.append(ch)
        elif c <= 0xFF:
            out.append(f"\\x{c:02x}")
        elif c <= 0xFFFF:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)  # astral planes are printable YAML
    out.append('"')
    return "".join(out)


def yaml_value(value: Any) -> str:
    """A front matter value that YAML reads back exactly: the `yaml_value` filter. A list or
    tuple becomes a flow sequence of such scalars."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_scalar(v) for v in value) + "]"
    return _yaml_scalar(value)


def _safe_destination(target: str) -> str | None:
    """A link destination that cannot run anything: http(s) or a relative path, percent-encoded
    (no spaces, parentheses, brackets or quotes left), '&' escaped so no entity decodes into a
    scheme. None when the target is not one a report should link to."""
    # Browsers drop tabs and newlines inside URLs and leading controls and spaces: do the same
    # before judging the scheme, so "java\tscript:" is seen for what it is.
    s = re.sub(r"[\t\n\r]", "", target).lstrip("".join(chr(c) for c in range(0x21)))
    if not s:
        return None
    for candidate in (s, html.unescape(s)):  # judged as stored and as entities decode
        m = _SCHEME.match(candidate)
        if m and m.group(1).lower() not in ("http", "https"):
            return None
        if not m and ":" in re.split(r"[/?#]", candidate, maxsplit=1)[0]:
            return None  # a relative path whose first segment some parser reads as a scheme
    return quote(s, safe=_LINK_SAFE_CHARS).replace("&", "\\&")


def link(text: Any, target: Any, image: bool = False) -> str:
    """`[text](target)` (or an image), inert: the text is escaped like `md`, the destination
    made safe; an unsafe target is shown as plain text beside the label instead."""
    label = md(text)
    dest = _safe_destination(str(target or ""))
    if dest is None:
        return f"{label} ({md(target)})" if target else label
    return f"{'!' if image else ''}[{label}]({dest})"


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f} %"


def vs(value: Any, expected: Any) -> str:
    """'value vs expected', or whichever of the two is known."""
    v = "" if value is None else str(value)
    e = "" if expected is None else str(expected)
    if v and e:
        return f"{v} vs {e}"
    return v or (f"expected {e}" if e else "")


def measured(r: Result) -> str:
    """A failing result's measurement against what was expected (or its threshold)."""
    value = format_value(r.value, r.unit)
    if r.expected is not None:
        return vs(value, format_value(r.expected, r.unit))
    if r.threshold is not None:
        return vs(value, f"threshold {format_value(r.threshold, r.unit)}")
    return value


@cache
def _environment(folder: str) -> Environment:
    """Markdown, not HTML: autoescape would put HTML entities in the Markdown source, so it is
    off and every value goes through the filters above instead. StrictUndefined: a typo in the
    template fails the render instead of silently dropping a section."""
    env = Environment(loader=FileSystemLoader(folder), autoescape=False,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    env.filters.update(md=md, md_block=md_block, fence=fence, yaml_value=yaml_value,
                       num=num, pct=pct)
    env.globals.update(link=link, vs=vs, measured=measured)
    return env


@cache
def _template() -> Template:
    """Built once a process: a run with thousands of failing nodes built a Jinja environment
    and compiled the template for each report (5 ms a node)."""
    return _environment(str(shipped("templates"))).get_template(TEMPLATE)


def _undiagnosed_ticket(d: Diagnosis) -> str:
    checks = ", ".join(sorted({r.check for r in d.failing})) or "none recorded"
    return (f"Node {d.node}: {d.verdict}, cause undiagnosed.\n"
            f"Gate: {d.gate}\nFailing checks: {checks}\n"
            f"Please drain the node and inspect it. Report {d.id}, run {d.run}.")


def _trend_caption(d: Diagnosis) -> str:
    t = d.trend
    if t is None or not t.points:
        return ""
    last = t.points[-1][1]
    parts = [f"{len(t.points)} measurements, latest {format_value(float(last), t.unit)}"]
    if t.threshold is not None:
        parts.append(f"threshold {format_value(float(t.threshold), t.unit)}")
    if t.baseline is not None:
        parts.append(f"baseline {format_value(float(t.baseline), t.unit)}")
    return "; ".join(parts) + "."


def render_markdown(d: Diagnosis, svg_name: str | None) -> str:
    """The report's text. `svg_name` is the trend chart's file name beside the report (as
    `write()` names it), or None when there is none; the chart is linked and listed as an
    asset only when it is given and the diagnosis has a trend."""
    top = d.top
    chart = svg_name if svg_name and d.trend is not None else None
    strongest = _strongest(top.evidence) if top else []
    return _template().render(
        d=d,
        decisive=_decisive(top),
        strongest=strongest,
        repeat_days=_repeat_days(),
        cause_title=top.title if top else "Undiagnosed",
        checks=sorted({r.check for r in d.failing}),
        assets=[chart] if chart else [],
        svg_name=chart,
        trend_caption=_trend_caption(d),
        ticket=top.ticket if top else _undiagnosed_ticket(d),
    )


def _decisive(top: Any) -> str:
    """The decisive evidence of the leading cause, in words ('' when none was seen)."""
    if top is None:
        return ""
    seen = [e for e in top.evidence if e.signal in top.decisive]
    return "; ".join(f"{e.description}" + (f" ({vs(e.value, e.expected)})" if e.value else "")
                     for e in seen[:2])


def _strongest(evidence: tuple[Any, ...], n: int = 3) -> list[Any]:
    """The n strongest pieces of evidence, one per signal first (two busbw sizes say less
    than busbw and an AER line), failing before warning, heavier first."""
    ranked = sorted(evidence, key=lambda e: (e.status != "fail", -e.weight))
    firsts = [e for i, e in enumerate(ranked) if e.signal not in {x.signal for x in ranked[:i]}]
    return (firsts + [e for e in ranked if e not in firsts])[:n]


def _repeat_days() -> str:
    from stetho import config

    return config.active().repeat_limit.split("/")[1]


def file_stem(d: Diagnosis) -> str:
    """`<node>-<cause>-<id>` with anything but letters, digits, '.', '_' and '-' replaced, so
    a node name cannot reach outside the output folder or hide the file as a dot-file. A very
    long stem is cut and suffixed with a hash of the whole, so distinct reports stay distinct."""
    stem = _STEM_UNSAFE.sub("_", f"{d.node}-{d.cause}-{d.id}")
    if stem[:1] in (".", "-"):
        stem = "_" + stem[1:]
    if len(stem) > _STEM_MAX:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:16]
        stem = f"{stem[:_STEM_MAX - 17]}-{digest}"
    return stem


def _atomic_write(path: Path, text: str) -> None:
    """Temp file in the same folder, then rename: a reader (or `kb publish` sweeping the
    folder) never sees half a report."""
    # Mode 0666 less the umask: the publisher or web server may read it as another user.
    atomic.write(path, text, fsync=True)


def write(d: Diagnosis, out_dir: Path) -> Path:
    """Write `<stem>.md` into `out_dir` (created if missing) and, when the diagnosis has trend
    points, `<stem>-trend.svg` beside it; the chart is written first so the report's link never
    points at a missing file. Returns the report's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(d)
    svg_name: str | None = None
    if d.trend is not None and d.trend.points:
        svg_name = f"{stem}-trend.svg"
        _atomic_write(out_dir / svg_name, render_trend(d.trend))
    report = out_dir / f"{stem}.md"
    _atomic_write(report, render_markdown(d, svg_name))
    return report

