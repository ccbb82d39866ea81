"""What mlxlink says about one port, typed: link state, per-lane values with their ranges,
pre- and post-FEC BER, and the module (cable or transceiver). `stetho.parsers.mlxlink` reads
its JSON and text output into these."""

from __future__ import annotations

import re

from stetho.core.record import record

_WIDTH = re.compile(r"^(\d+)\s*[xX]$")
_GBPS = re.compile(r"^(\d+(?:\.\d+)?)\s*G", re.IGNORECASE)
#: InfiniBand generations as mlxlink names them ("IB-NDR"), Gb/s per lane (nominal).
IB_LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0,
                "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
#: The FEC modes a BER limit can be keyed by (stetho.profiles.FEC_MODES), told apart by the
#: Reed-Solomon code in mlxlink's FEC text: RS(544,514) "KP4" (HDR, NDR, 200/400GbE PAM4; also
#: "Interleaved_..." and "... + PLR"), RS(528,514) "KR4" (EDR, 100GbE NRZ), RS(272,257+1) the
#: low-latency code, Firecode (BASE-R, FC-FEC) and none.
FEC_MODES = ("rs544", "rs528", "rs272", "firecode", "none")
_FEC_CODES = (("544", "rs544"), ("528", "rs528"), ("272", "rs272"))
_NO_FEC = re.compile(r"^no[\s_-]*fec$|^none$|^off$|^disabled?$", re.IGNORECASE)
_FIRECODE = re.compile(r"fire[\s_-]*code|fc[\s_-]*fec|base[\s_-]*r\b", re.IGNORECASE)


@record
class Range:
    """The `[low..high]` pair mlxlink prints after a module reading (the module's thresholds);
    either end is None where mlxlink printed N/A."""

    low: float | None
    high: float | None

    def contains(self, value: float) -> bool:
        """True when value lies inside the range (an open end does not bound it)."""
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


@record
class MlxlinkLane:
    """One lane, index-aligned across mlxlink's per-lane lists. Powers in dBm (None for N/A or
    a dark lane: see `rx_dark`/`tx_dark`, True where mlxlink printed -inf, i.e. 0 mW); BER with
    the 15E-255 sentinel read as 0.0; flags are True when the module raises them."""

    index: int
    rx_power_dbm: float | None = None
    tx_power_dbm: float | None = None
    rx_dark: bool = False
    tx_dark: bool = False
    bias_ma: float | None = None
    raw_ber: float | None = None
    raw_errors: int | None = None
    rx_los: bool | None = None
    tx_los: bool | None = None
    tx_fault: bool | None = None
    rx_cdr_lol: bool | None = None
    tx_cdr_lol: bool | None = None
    datapath_state: str | None = None


@record
class MlxlinkModule:
    """The cable or transceiver ("Module Info"). `*_range` are the `[low..high]` thresholds
    printed with each reading; the per-lane readings themselves are on MlxlinkReport.lanes."""

    identifier: str | None = None
    cable_type: str | None = None
    technology: str | None = None
    compliance: str | None = None
    vendor: str | None = None
    part_number: str | None = None
    serial_number: str | None = None
    revision: str | None = None
    fw_version: str | None = None
    oui: str | None = None
    wavelength_nm: float | None = None
    ddm: bool | None = None
    state: str | None = None
    fw_fault: bool | None = None
    datapath_fw_fault: bool | None = None
    temperature_c: float | None = None
    temperature_range: Range | None = None
    voltage_mv: float | None = None
    voltage_range: Range | None = None
    rx_power_range: Range | None = None
    tx_power_range: Range | None = None
    bias_range: Range | None = None

    @property
    def passive(self) -> bool:
        """A passive copper cable (DAC): no optics, so DDM readings carry no information (MFT
        prints them N/A, or as zeros with a '[0..0]' range on ConnectX-7)."""
        kinds = f"{self.cable_type or ''} {self.technology or ''}".lower()
        return "passive" in kinds and "copper" in kinds


@record
class MlxlinkReport:
    """One mlxlink run. `ok` is False when mlxlink's status code was not 0, or (text output)
    it printed an `-E-` line (then `message` says why and the other fields hold whatever output
    came along, often none; `status_code` is None for text).
    `status_opcode`/`recommendation` are mlxlink's own troubleshooting verdict on the link;
    `sections` names the output sections present, as printed. `device`/`port` are what the caller
    passed to `parse` (mlxlink's JSON does not name them)."""

    ok: bool
    status_code: int | None = None
    message: str | None = None
    warning: str | None = None
    device: str | None = None
    port: str | None = None
    fw_version: str | None = None
    mft_version: str | None = None
    state: str | None = None
    physical_state: str | None = None
    speed: str | None = None
    width: str | None = None
    fec: str | None = None
    loopback: str | None = None
    auto_negotiation: str | None = None
    raw_ber: float | None = None
    effective_ber: float | None = None
    symbol_ber: float | None = None
    effective_errors: int | None = None
    symbol_errors: int | None = None
    link_down: int | None = None
    link_error_recovery: int | None = None
    minutes_since_clear: float | None = None
    status_opcode: int | None = None
    recommendation: str | None = None
    module: MlxlinkModule | None = None
    lanes: tuple[MlxlinkLane, ...] = ()
    sections: tuple[str, ...] = ()
    format: str = "json"  # which output it was read from: "json" (--json) or "text"

    @property
    def pre_fec_ber(self) -> float | None:
        """The raw physical BER, before FEC correction (the 15E-255 sentinel read as 0.0)."""
        return self.raw_ber

    @property
    def post_fec_ber(self) -> float | None:
        """The effective physical BER, after FEC correction."""
        return self.effective_ber

    @property
    def fec_mode(self) -> str | None:
        """The FEC mode in use, one of FEC_MODES; None when mlxlink printed none or one this
        does not know (then a check must not assume the FEC's tolerance)."""
        text = (self.fec or "").strip()
        if not text:
            return None
        for code, mode in _FEC_CODES:
            if re.search(rf"\(\s*{code}\s*,", text) or re.search(rf"\b{code}\s*,\s*\d", text):
                return mode
        if _NO_FEC.match(text):
            return "none"
        if _FIRECODE.search(text):
            return "firecode"
        return None

    @property
    def lane_gbps(self) -> float | None:
        """Gb/s per lane: from the InfiniBand generation ("IB-HDR" -> 50), or the port speed
        over the width ("400G", "4x" -> 100); None when mlxlink does not say."""
        speed = (self.speed or "").strip().upper()
        if not speed:
            return None
        gen = speed.removeprefix("IB-").removeprefix("IB_")
        if gen in IB_LANE_GBPS:
            return IB_LANE_GBPS[gen]
        m = _GBPS.match(speed)
        lanes = self.width_lanes
        if m is None or not lanes:
            return None
        return float(m.group(1)) / lanes

    @property
    def port_gbps(self) -> float | None:
        """Gb/s of the port: lanes x Gb/s per lane ("IB-NDR", "4x" -> 400)."""
        lane, lanes = self.lane_gbps, self.width_lanes
        return None if lane is None or not lanes else lane * lanes

    @property
    def width_lanes(self) -> int | None:
        """'4x' -> 4."""
        if self.width is None:
            return None
        m = _WIDTH.match(self.width.strip())
        return int(m.group(1)) if m else None

    @property
    def link_up(self) -> bool:
        """True when mlxlink reported the port State as Active."""
        return self.state is not None and self.state.strip().lower() == "active"
