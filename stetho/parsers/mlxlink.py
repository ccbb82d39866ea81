"""Parse `mlxlink -d <dev> [-p <port>] [-m] [-c] [--json]` (NVIDIA/Mellanox MFT link diagnostics).

Both formats are read, told apart by a line that opens with '{': `--json`, and the text mlxlink
prints without it (sections underlined with dashes, `Key : value` lines; see mlxlink_text),
which holds the same sections and keys. Everything below applies to both.

mlxlink's JSON is `{"result": {"output": {<section>: {<field>: <value>}}}, "status": {"code": N,
"message": "..."}}` (MFT 4.34 prints it tab-indented, with " : " separators and sorted keys; any
JSON spacing is accepted, and so are stray lines such as `-W-` warnings before the opening brace).
A `status.code` other than 0 is a failed run ("Failed to open device", ...): the parser returns a
report with `ok = False` and the message instead of raising, with whatever output came along.
`result.warning.message`, when mlxlink sets it, is kept as `warning`.

Fields read (section and field names are matched ignoring case and runs of spaces; any section
or field may be missing, which leaves the matching report field None):

- "Operational Info": "State" (e.g. "Active"), "Physical state" ("LinkUp", or on Ethernet the
  AN state machine, e.g. "ETH_AN_FSM_ENABLE" on an Active link), "Speed" ("400G"), "Width"
  ("4x"), "FEC" ("Standard_RS-FEC - (544,514)"), "Loopback Mode", "Auto Negotiation".
- "Physical Counters and BER Info": "Raw Physical BER" (pre-FEC), "Effective Physical BER"
  (post-FEC), "Symbol BER" (IB only), "Effective Physical Errors", "Symbol Errors" (IB only),
  "Link Down Counter", "Link Error Recovery Counter", "Time Since Last Clear [Min]", and per lane
  "Raw Physical BER Per Lane" and "Raw Physical Errors Per Lane".
- "Module Info": "Identifier" ("OSFP"), "Cable Type", "Cable Technology", "Compliance",
  "Vendor Name", "Vendor Part Number", "Vendor Serial Number", "Rev", "FW Version", "OUI",
  "Wavelength [nm]", "Digital Diagnostic Monitoring", "Module State", "Module FW Fault",
  "DataPath FW Fault", "Temperature [C]", "Voltage [mV]", and per lane "Rx Power Current [dBm]",
  "Tx Power Current [dBm]", "Bias Current [mA]", "Rx LOS [per lane]", "Tx LOS [per lane]",
  "Tx Fault [per lane]", "Rx CDR LOL [per lane]", "Tx CDR LOL [per lane]",
  "DataPath state [per lane]".
- "Tool Information": "Firmware Version" (the adapter's FW), "MFT Version".
- "Troubleshooting Info": "Status Opcode", "Recommendation".

Value quirks handled:

- BER strings are `<coef>E-<magnitude>` ("5E-10"). A magnitude of 255 is mlxlink's sentinel for
  "no errors counted" (`15E-255` would otherwise read as 1.5e-254): it becomes 0.0.
- Per-lane values come either as a JSON list under `{"values": [...]}` or as one comma-joined
  string, which for the DDM readings ends in the module's `[low..high]` range, as in
  "3.583,3.253,3.233,2.658 [-9.914..6.999]" (four lanes, low 9.914 below zero, high 6.999). The
  range is the module's low/high threshold pair that mlxlink prints beside the value; mlxlink
  does not say whether it is the alarm or the warning pair. Scalars carry the range the same way
  ("61 [-10..80]").
- Optical power of a dark lane (0 mW) prints as `-inf` dBm: the lane's power is None and its
  `rx_dark`/`tx_dark` flag is True. `N/A` anywhere gives None.
- ANSI colour codes, should a wrapper leave them in, are stripped from every string.

Per-lane lists are aligned by index; `lanes` is as long as the longest of them, and a list that
is shorter (e.g. a single "N/A") leaves None in the remaining lanes. mlxlink's JSON names neither
the device nor the port; pass `device`/`port` to carry the ones the probe ran against.
"""

from __future__ import annotations

__all__ = ["TOOL", "MlxlinkLane", "MlxlinkModule", "MlxlinkReport", "Range", "parse"]

import json
import re
from collections.abc import Mapping

from stetho.parsers import ParseError, mlxlink_text
from stetho.parsers._text import guarded
from stetho.parsers.mlxlink_model import MlxlinkLane, MlxlinkModule, MlxlinkReport, Range
from stetho.parsers.mlxlink_values import (
    TOOL,
    T,
    _ber,
    _clean,
    _count,
    _dbm,
    _flag,
    _int,
    _lane_values,
    _norm,
    _number,
    _reading,
    _scalar,
)

_KNOWN_SECTIONS = (
    "operational info",
    "physical counters and ber info",
    "module info",
    "tool information",
    "troubleshooting info",
)


def parse(text: str | bytes, *, device: str | None = None,
          port: str | int | None = None) -> MlxlinkReport:
    """Parse one mlxlink output, `--json` or text (told apart by a line opening with '{'),
    into an MlxlinkReport.

    `device` and `port` are echoed into the report (mlxlink names neither). Raises ParseError
    for empty, binary, truncated or non-mlxlink input, and for values it cannot read; nothing
    else escapes. A device's bad output is its own ParseError: isolating it is the caller's job.
    """
    port_text = None if port is None else str(port)
    return guarded(TOOL, text, lambda data: _parse(data, device, port_text))


def _parse(data: str, device: str | None, port: str | None) -> MlxlinkReport:
    start = _json_start(data)
    if start is None:
        return _parse_text(data, device, port)
    root = _load(data, start)
    status_code, message = _status(root)
    result = root.get("result")
    if result is not None and not isinstance(result, dict):
        raise ParseError(TOOL, f"'result' is a {type(result).__name__}, not an object")
    result = result or {}
    warning = _warning(result)
    output = result.get("output")
    if output is not None and not isinstance(output, dict):
        raise ParseError(TOOL, f"'result.output' is a {type(output).__name__}, not an object")
    sections, names = _sections(output or {})
    ok = status_code in (None, 0)
    base = MlxlinkReport(ok=ok, status_code=status_code, message=message, warning=warning,
                         device=device, port=port, sections=names, format="json")
    return _report(base, sections)


def _parse_text(data: str, device: str | None, port: str | None) -> MlxlinkReport:
    """The text format: `-E-` lines make the run failed (ok False, message the first), as a
    non-zero status code does in JSON; `-W-` lines are kept as the warning."""
    out = mlxlink_text.read(TOOL, data)
    if not out.sections:
        if out.errors:
            raise ParseError(TOOL, f"mlxlink failed without output: {_clean(out.errors[0])[:200]}")
        raise ParseError(TOOL, "not mlxlink output (no '{' and no section title underlined "
                               "with dashes)")
    sections, names = _sections(out.sections)
    base = MlxlinkReport(
        ok=not out.errors, message=_clean(out.errors[0]) if out.errors else None,
        warning=_clean(" ".join(out.warnings)) if out.warnings else None, device=device,
        port=port, sections=names, format="text")
    return _report(base, sections)


def _report(base: MlxlinkReport, sections: Mapping[str, Mapping[str, object]]) -> MlxlinkReport:
    if not base.ok:
        try:
            return _fill(base, sections)
        except ParseError:
            return base  # a failed run's partial output: the failure is what matters
    if not any(s in sections for s in _KNOWN_SECTIONS):
        raise ParseError(TOOL, "no mlxlink section (Operational Info, Physical Counters and "
                               "BER Info, Module Info, ...) in the output")
    return _fill(base, sections)


# -- structure ---------------------------------------------------------------------------------


def _load(data: str, start: int) -> dict[str, object]:
    try:
        root, end = json.JSONDecoder().raw_decode(data, start)
    except (ValueError, RecursionError) as exc:
        raise ParseError(TOOL, f"invalid JSON: {str(exc)[:200]}") from None
    if data[end:].strip():
        raise ParseError(TOOL, f"unexpected text after the JSON: {data[end:].strip()[:80]!r}")
    if not isinstance(root, dict):
        raise ParseError(TOOL, f"top-level JSON is a {type(root).__name__}, not an object")
    if "status" not in root and "result" not in root:
        raise ParseError(TOOL, "not mlxlink JSON (no 'status' or 'result' member)")
    return root


def _json_start(data: str) -> int | None:
    """Offset of the JSON object: the first line whose first non-blank character is '{'."""
    if data[:1] == "{":  # the usual --json output: no need to split it into lines
        return 0
    offset = 0
    for line in data.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith("{"):
            return offset + len(line) - len(stripped)
        offset += len(line)
    return None


def _status(root: Mapping[str, object]) -> tuple[int | None, str | None]:
    status = root.get("status")
    if status is None:
        return None, None
    if not isinstance(status, dict):
        raise ParseError(TOOL, f"'status' is a {type(status).__name__}, not an object")
    code = status.get("code")
    if isinstance(code, bool) or not isinstance(code, (int, str)):
        raise ParseError(TOOL, f"status.code is not an integer: {code!r}"[:200])
    if isinstance(code, str):
        if not re.fullmatch(r"\s*-?\d+\s*", code):
            raise ParseError(TOOL, f"status.code is not an integer: {code[:40]!r}")
        code = _int("status.code", code)
    msg = status.get("message")
    if msg is not None and not isinstance(msg, str):
        raise ParseError(TOOL, f"status.message is a {type(msg).__name__}, not a string")
    return code, (_clean(msg) or None) if msg is not None else None


def _warning(result: Mapping[str, object]) -> str | None:
    warn = result.get("warning")
    if isinstance(warn, dict):
        warn = warn.get("message")
    if isinstance(warn, str) and warn.strip():
        return _clean(warn)
    return None


def _sections(output: Mapping[str, object]) -> tuple[dict[str, dict[str, object]], tuple[str, ...]]:
    """Sections by normalised name, and their names as mlxlink printed them."""
    sections: dict[str, dict[str, object]] = {}
    names: list[str] = []
    for name, body in output.items():
        if not isinstance(body, dict):
            continue  # unknown scalar members are not sections we read
        sections[_norm(name)] = {_norm(k): v for k, v in body.items()}
        names.append(name)
    return sections, tuple(names)


# -- report ------------------------------------------------------------------------------------


class _LaneLists:
    """Per-lane lists as read, before they are zipped into MlxlinkLane records."""

    def __init__(self) -> None:
        self.rx_power_dbm: list[float | None] = []
        self.tx_power_dbm: list[float | None] = []
        self.rx_dark: list[bool] = []
        self.tx_dark: list[bool] = []
        self.bias_ma: list[float | None] = []
        self.raw_ber: list[float | None] = []
        self.raw_errors: list[int | None] = []
        self.rx_los: list[bool | None] = []
        self.tx_los: list[bool | None] = []
        self.tx_fault: list[bool | None] = []
        self.rx_cdr_lol: list[bool | None] = []
        self.tx_cdr_lol: list[bool | None] = []
        self.datapath_state: list[str | None] = []

    def lanes(self) -> tuple[MlxlinkLane, ...]:
        count = max(len(v) for v in vars(self).values())

        def at(values: list[T], i: int, default: T) -> T:
            return values[i] if i < len(values) else default

        return tuple(
            MlxlinkLane(
                index=i,
                rx_power_dbm=at(self.rx_power_dbm, i, None),
                tx_power_dbm=at(self.tx_power_dbm, i, None),
                rx_dark=at(self.rx_dark, i, False),
                tx_dark=at(self.tx_dark, i, False),
                bias_ma=at(self.bias_ma, i, None),
                raw_ber=at(self.raw_ber, i, None),
                raw_errors=at(self.raw_errors, i, None),
                rx_los=at(self.rx_los, i, None),
                tx_los=at(self.tx_los, i, None),
                tx_fault=at(self.tx_fault, i, None),
                rx_cdr_lol=at(self.rx_cdr_lol, i, None),
                tx_cdr_lol=at(self.tx_cdr_lol, i, None),
                datapath_state=at(self.datapath_state, i, None),
            )
            for i in range(count)
        )


def _fill(base: MlxlinkReport, sections: Mapping[str, Mapping[str, object]]) -> MlxlinkReport:
    op = sections.get("operational info", {})
    ber = sections.get("physical counters and ber info", {})
    tool = sections.get("tool information", {})
    trouble = sections.get("troubleshooting info", {})
    mod = sections.get("module info")

    lanes = _LaneLists()
    module = _module(mod, lanes) if mod is not None else None
    lanes.raw_ber = _lane_values(ber, "Raw Physical BER Per Lane", _ber)[0] or []
    lanes.raw_errors = _lane_values(ber, "Raw Physical Errors Per Lane", _count)[0] or []

    return MlxlinkReport(
        ok=base.ok, status_code=base.status_code, message=base.message, warning=base.warning,
        device=base.device, port=base.port,
        fw_version=_scalar(tool, "Firmware Version"),
        mft_version=_mft(_scalar(tool, "MFT Version")),
        state=_scalar(op, "State"),
        physical_state=_scalar(op, "Physical state"),
        speed=_scalar(op, "Speed"),
        width=_scalar(op, "Width"),
        fec=_scalar(op, "FEC"),
        loopback=_scalar(op, "Loopback Mode"),
        auto_negotiation=_scalar(op, "Auto Negotiation"),
        raw_ber=_ber("Raw Physical BER", _scalar(ber, "Raw Physical BER")),
        effective_ber=_ber("Effective Physical BER", _scalar(ber, "Effective Physical BER")),
        symbol_ber=_ber("Symbol BER", _scalar(ber, "Symbol BER")),
        effective_errors=_count("Effective Physical Errors",
                                _scalar(ber, "Effective Physical Errors")),
        symbol_errors=_count("Symbol Errors", _scalar(ber, "Symbol Errors")),
        link_down=_count("Link Down Counter", _scalar(ber, "Link Down Counter")),
        link_error_recovery=_count("Link Error Recovery Counter",
                                   _scalar(ber, "Link Error Recovery Counter")),
        minutes_since_clear=_number("Time Since Last Clear [Min]",
                                    _scalar(ber, "Time Since Last Clear [Min]")),
        status_opcode=_count("Status Opcode", _scalar(trouble, "Status Opcode")),
        recommendation=_scalar(trouble, "Recommendation"),
        module=module,
        lanes=lanes.lanes(),
        sections=base.sections,
        format=base.format,
    )


def _module(mod: Mapping[str, object], lanes: _LaneLists) -> MlxlinkModule:
    temp, temp_rng = _reading(mod, "Temperature [C]")
    volt, volt_rng = _reading(mod, "Voltage [mV]")
    rx, rx_rng = _lane_values(mod, "Rx Power Current [dBm]", _dbm)
    tx, tx_rng = _lane_values(mod, "Tx Power Current [dBm]", _dbm)
    bias, bias_rng = _lane_values(mod, "Bias Current [mA]", _lane_number)
    if rx is not None:
        lanes.rx_power_dbm = [None if v is None else v[0] for v in rx]
        lanes.rx_dark = [v is not None and v[1] for v in rx]
    if tx is not None:
        lanes.tx_power_dbm = [None if v is None else v[0] for v in tx]
        lanes.tx_dark = [v is not None and v[1] for v in tx]
    lanes.bias_ma = bias or []
    lanes.rx_los = _lane_values(mod, "Rx LOS [per lane]", _flag)[0] or []
    lanes.tx_los = _lane_values(mod, "Tx LOS [per lane]", _flag)[0] or []
    lanes.tx_fault = _lane_values(mod, "Tx Fault [per lane]", _flag)[0] or []
    lanes.rx_cdr_lol = _lane_values(mod, "Rx CDR LOL [per lane]", _flag)[0] or []
    lanes.tx_cdr_lol = _lane_values(mod, "Tx CDR LOL [per lane]", _flag)[0] or []
    lanes.datapath_state = _lane_values(mod, "DataPath state [per lane]", _text)[0] or []
    return MlxlinkModule(
        identifier=_scalar(mod, "Identifier"),
        cable_type=_scalar(mod, "Cable Type"),
        technology=_scalar(mod, "Cable Technology"),
        compliance=_scalar(mod, "Compliance"),
        vendor=_scalar(mod, "Vendor Name"),
        part_number=_scalar(mod, "Vendor Part Number"),
        serial_number=_scalar(mod, "Vendor Serial Number"),
        revision=_scalar(mod, "Rev"),
        fw_version=_scalar(mod, "FW Version"),
        oui=_scalar(mod, "OUI"),
        wavelength_nm=_number("Wavelength [nm]", _scalar(mod, "Wavelength [nm]")),
        ddm=_flag("Digital Diagnostic Monitoring", _scalar(mod, "Digital Diagnostic Monitoring")),
        state=_scalar(mod, "Module State"),
        fw_fault=_flag("Module FW Fault", _scalar(mod, "Module FW Fault")),
        datapath_fw_fault=_flag("DataPath FW Fault", _scalar(mod, "DataPath FW Fault")),
        temperature_c=temp,
        temperature_range=temp_rng,
        voltage_mv=volt,
        voltage_range=volt_rng,
        rx_power_range=rx_rng,
        tx_power_range=tx_rng,
        bias_range=bias_rng,
    )


def _mft(text: str | None) -> str | None:
    """The text format prints 'mft 4.30.1-8' where JSON has '4.30.1-8'."""
    if text is None:
        return None
    return text[4:].strip() if text.lower().startswith("mft ") else text


def _text(key: str, text: str) -> str:
    return text


def _lane_number(key: str, text: str) -> float:
    value = _number(key, text)
    if value is None:  # pragma: no cover - N/A lanes never reach a converter
        raise ParseError(TOOL, f"field {key!r}: missing number")
    return value
