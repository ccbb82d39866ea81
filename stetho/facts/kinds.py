"""What every metric is, for drift: its kind, its resolution and the smallest change that means
something, in one table a profile overrides (``drift.metrics`` in baselines/*.yml).

- ``kind``: a *counter* is cumulative (errors since boot or reset): drift judges its growth
  rate, and a counter leaving 0 is news. A *gauge* is a level (temperature, power, clocks,
  busbw): drift compares it with the node's own history, on a scale never finer than its
  resolution or its minimum meaningful change, so an idle GPU going from 30 to 31 °C is not
  "infinitely surprising".
- ``resolution``: the unit's step as the tool reports it (1 °C, 0.01 W, 1 MHz).
- ``min_change`` / ``min_change_pct``: the smallest change worth a warning, absolute and
  relative to the level (the larger wins): 3 °C, 5 % of power, 2 % of busbw.
- ``rhythm``: ``daily`` compares with runs at the same hour of day (a hotter afternoon is not
  drift), ``weekly`` with the same hour on the same weekday where history allows.
- ``trend``: should stay flat; drift fits a line and warns before it crosses its threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from stetho.core.record import record

KINDS = ("counter", "gauge", "epoch")
RHYTHMS = ("none", "daily", "weekly")


@record
class MetricKind:
    kind: str
    resolution: float = 0.0
    min_change: float = 0.0
    min_change_pct: float = 0.0
    rhythm: str = "none"
    trend: bool = False

    def meaningful(self, level: float) -> float:
        """The smallest change worth a warning at this level: the larger of the two minima."""
        return max(self.min_change, self.min_change_pct / 100.0 * abs(level))


def _counter(trend: bool = False) -> MetricKind:
    return MetricKind("counter", resolution=1.0, trend=trend)


#: The RoCE counters history records (stetho.facts.metrics, check "roce"): CNPs and ECN marks,
#: sequence errors and timeouts (hw_counters); PFC pauses per priority, pause storms and
#: physical discards (mlx5 ethtool -S).
ROCE_COUNTERS = (
    "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence",
    "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err", "rx_icrc_encapsulated",
    *(f"{d}_prio{p}_pause" for p in range(8) for d in ("rx", "tx")),
    "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy", "tx_discards_phy",
    "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
)

_TEMPERATURE = MetricKind("gauge", resolution=1.0, min_change=3.0, rhythm="daily")

#: The shipped table: every metric stetho.facts.metrics.extract can produce is declared here
#: (tests/test_drift.py proves it on a real node's metrics).
TABLE: dict[str, MetricKind] = {
    "temperature_c": _TEMPERATURE,
    "memory_temperature_c": _TEMPERATURE,
    "power_w": MetricKind("gauge", resolution=0.01, min_change=2.0, min_change_pct=5.0,
                          rhythm="daily"),
    # The SM clock of the moment jumps between bins with any load (idle 70-400 MHz, boost
    # ~2 GHz): only a large change is one (the clocks check judges the targets).
    "sm_clock_mhz": MetricKind("gauge", resolution=1.0, min_change=300.0, min_change_pct=10.0),
    "app_sm_clock_mhz": MetricKind("gauge", resolution=1.0, min_change_pct=1.0),
    "app_mem_clock_mhz": MetricKind("gauge", resolution=1.0, min_change_pct=1.0),
    "rate_gbps": MetricKind("gauge", resolution=1.0, min_change_pct=1.0),
    "busbw_gbps": MetricKind("gauge", resolution=0.01, min_change_pct=2.0),
    # BER spans orders of magnitude and wanders by tens of % between counting windows: only a
    # tripling is worth a word (the trend and the static limits catch the climb to the limit).
    "pre_fec_ber": MetricKind("gauge", min_change=1e-12, min_change_pct=200.0, trend=True),
    "ecc_correctable": _counter(trend=True),
    "ecc_uncorrectable": _counter(),
    "remapped_rows_correctable": _counter(trend=True),
    "remapped_rows_uncorrectable": _counter(),
    "pcie_replays": _counter(),
    "nvlink_replay": _counter(),
    "nvlink_recovery": _counter(),
    "nvlink_crc": _counter(),
    "SymbolErrorCounter": _counter(trend=True),
    "LinkErrorRecoveryCounter": _counter(),
    "LinkDownedCounter": _counter(),
    "PortRcvErrors": _counter(),
    "PortRcvRemotePhysicalErrors": _counter(),
    "LocalLinkIntegrityErrors": _counter(),
    "ExcessiveBufferOverrunErrors": _counter(),
    "PortXmitDiscards": _counter(),
    "PortLocalPhysicalErrors": _counter(),
    "PortMalformedPktErrors": _counter(),
    "PortBufferOverrunErrors": _counter(),
    # Events in the kernel log since boot: cumulative, and a reboot (or a rotated ring buffer)
    # reads as a reset. Each Xid is the static check's to judge.
    "xid_events": _counter(),
    "aer_corrected": _counter(),
    # Host memory errors since the EDAC driver loaded (all memory controllers summed).
    "edac_ce": _counter(trend=True),
    "edac_ue": _counter(),
    # NVMe SMART lifetime counters per controller (host_nvme_health judges their growth).
    "nvme_media_errors": _counter(),
    "nvme_err_log_entries": _counter(),
    # Microseconds of clock slowdown since the driver loaded (550+ drivers): judged by their
    # growth within the counter window by the throttle check.
    "throttle_hw_thermal_us": _counter(),
    "throttle_hw_power_brake_us": _counter(),
    "throttle_sw_thermal_us": _counter(),
    # RoCE congestion and loss (stetho.facts.roce): the RDMA hw_counters and the netdev's
    # ethtool -S counters, judged by their growth within the window by roce_congestion.
    **{name: _counter() for name in ROCE_COUNTERS},
    # The boot id as a number: no level to compare, it marks the counters' epochs.
    "boot_id": MetricKind("epoch"),
}


def resolve(metric: str, overrides: Mapping[str, Mapping[str, object]] | None = None
            ) -> MetricKind | None:
    """The metric's entry with the profile's overrides applied; None when neither declares it.

    ``overrides`` is the profile's ``drift.metrics``: metric -> the fields it changes (already
    validated by stetho.profiles). A metric only the profile knows must name its kind there.
    """
    base = TABLE.get(metric)
    change = (overrides or {}).get(metric)
    if not change:
        return base
    if base is None:
        if change.get("kind") not in KINDS:
            return None
        base = MetricKind(str(change["kind"]))
    return replace(base, **{k: v for k, v in change.items() if v is not None})  # type: ignore[arg-type]


COUNTERS = frozenset(m for m, k in TABLE.items() if k.kind == "counter")
FLAT = frozenset(m for m, k in TABLE.items() if k.trend)
