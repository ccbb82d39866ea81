"""mlxlink --json parser on the real recorded output, variants of it, and garbage."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from stetho.parsers import ParseError, mlxlink
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

FILES = real_files("07-mlxlink-ethtool", "mlxlink-*")
MLX = REAL / "07-mlxlink-ethtool"
DR4 = MLX / "mlxlink-json-400g-osfp-dr4-mft4.34.1.json"
ETHTOOL = MLX / "ethtool-m-qsfp-40g-sr4-mlx4-neginf-lanes.txt"
BF3 = MLX / "mlxlink-text-bluefield3-100g-qsfp28-passive-copper-mft4.30.1.txt"
CX6 = MLX / "mlxlink-text-cx6-ib-hdr-2x-ber-monitor-unsupported-mft4.24.0.txt"
CX7 = MLX / "mlxlink-text-cx7-ib-ndr-osfp-passive-dac-show-module-mft4.35.0.txt"
TEXT_FILES = (BF3, CX6, CX7)


def _doc() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DR4.read_text())
    return loaded


def _dump(doc: dict[str, Any]) -> str:
    """mlxlink's own layout: tab indent, ' : ' separators, sorted keys."""
    return json.dumps(doc, indent="\t", separators=(",", " : "), sort_keys=True) + "\n"


def _variant(**sections: dict[str, Any]) -> str:
    """The real document with fields replaced (None deletes) in the named sections."""
    doc = _doc()
    out = doc["result"]["output"]
    for name, fields in sections.items():
        section = out.setdefault(name.replace("_", " "), {})
        for key, value in fields.items():
            if value is None:
                section.pop(key, None)
            else:
                section[key] = value
    return _dump(doc)


def test_every_mlxlink_file_is_covered() -> None:
    assert set(FILES) == {DR4, *TEXT_FILES}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    r = mlxlink.parse(path.read_text(), device="mlx5_0", port=1)
    assert r.format == ("json" if path.suffix == ".json" else "text")
    assert r.ok == (path != CX6)
    assert (r.state, r.physical_state in ("LinkUp", "ETH_AN_FSM_ENABLE")) == ("Active", True)
    assert r.link_up and r.width_lanes in (2, 4) and r.speed is not None
    assert r.fw_version and r.mft_version and r.mft_version[0].isdigit()
    assert (r.status_opcode, r.recommendation) == (0, "No issue was observed")
    assert (r.device, r.port) == ("mlx5_0", "1")
    assert mlxlink.parse(path.read_bytes(), device="mlx5_0", port=1) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.ok = False  # type: ignore[misc]


def test_json_file_status_and_lanes() -> None:
    r = mlxlink.parse(DR4.read_text())
    assert r.ok and r.status_code == 0 and r.message == "success"
    assert r.lanes and r.module is not None and r.pre_fec_ber is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.lanes[0].raw_ber = 0.0  # type: ignore[misc]


def test_text_bluefield3_passive_copper_everything_na() -> None:
    r = mlxlink.parse(BF3.read_text())
    assert (r.format, r.ok, r.status_code, r.message, r.warning) == ("text", True, None, None, None)
    assert (r.speed, r.width, r.fec) == ("100G", "4x", "Standard RS-FEC - RS(528,514)")
    assert (r.fw_version, r.mft_version) == ("32.43.2402", "4.30.1-8")  # 'mft ' dropped
    assert (r.raw_ber, r.effective_ber) == (0.0, 0.0)  # 15E-255: no errors counted
    assert (r.effective_errors, r.link_down, r.link_error_recovery) == (0, 0, 0)
    assert r.minutes_since_clear == 25074.8
    assert [ln.raw_errors for ln in r.lanes] == [0, 0, 0, 0]
    assert {(ln.rx_power_dbm, ln.bias_ma, ln.rx_los, ln.datapath_state) for ln in r.lanes} == {
        (None, None, None, None)}
    m = r.module
    assert m is not None and m.passive
    assert (m.identifier, m.vendor, m.part_number, m.ddm) == ("QSFP28", "FS", "Q28-PC03", False)
    assert (m.temperature_c, m.voltage_mv, m.wavelength_nm, m.state, m.fw_fault) == (
        None, None, None, None, None)
    assert r.sections == ("Operational Info", "Supported Info", "Troubleshooting Info",
                          "Tool Information", "Module Info", "Physical Counters and BER Info")


def test_text_connectx6_error_line_makes_the_run_failed() -> None:
    """`--show_ber_monitor` on an HCA: the link sections print, then an -E- line (stderr)."""
    r = mlxlink.parse(CX6.read_text())
    assert (r.ok, r.status_code) == (False, None)
    assert r.message == '"--show_ber_monitor" option is not supported for HCA'
    assert (r.speed, r.width_lanes, r.fec) == ("IB-HDR", 2, "RS-FEC - (544,514) + PLR")
    assert (r.fw_version, r.mft_version, r.module, r.lanes) == (
        "20.36.1010", "4.24.0-72", None, ())
    assert (r.raw_ber, r.symbol_ber) == (None, None)  # not asked for: unknown


def test_text_connectx7_passive_dac_zeros_and_flags() -> None:
    r = mlxlink.parse(CX7.read_text())
    assert r.ok and (r.state, r.physical_state) == ("Active", "LinkUp")  # trailing space gone
    assert (r.speed, r.fw_version, r.mft_version) == ("IB-NDR", "28.46.3048", "4.35.0-159")
    assert r.fec == "Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)"
    m = r.module
    assert m is not None and m.passive and m.ddm is True
    # Passive copper prints zero readings with a zero range: as printed, flagged passive.
    assert (m.temperature_c, m.temperature_range) == (0.0, mlxlink.Range(0.0, 0.0))
    assert m.rx_power_range == mlxlink.Range(0.0, 0.0)
    assert (m.state, m.fw_fault, m.datapath_fw_fault) == ("Ready state", False, False)
    assert [ln.rx_los for ln in r.lanes] == [True, False, True, True]
    assert [ln.rx_cdr_lol for ln in r.lanes] == [True, True, True, True]
    assert [ln.datapath_state for ln in r.lanes] == [None, None, None, None]  # N/A per lane
    assert (r.raw_ber, r.lanes[0].raw_errors) == (None, None)  # -c not asked


def _as_text(doc: dict[str, Any]) -> str:
    """mlxlink's text layout for a JSON document's sections (titles underlined, padded keys)."""
    out = []
    for name, section in doc["result"]["output"].items():
        out += ["", name, "-" * len(name)]
        for key, value in section.items():
            if isinstance(value, dict):
                value = ",".join(str(v) for v in value.get("values", []))
            out.append(f"{key:<35}: {value}")
    return "\n".join(out) + "\n"


def test_text_and_json_of_the_same_run_read_the_same() -> None:
    doc = _doc()
    doc["result"]["output"] = {k: v for k, v in doc["result"]["output"].items()
                               if k != "Supported Info"}  # nested masks: JSON only
    from_json = mlxlink.parse(_dump(doc))
    from_text = mlxlink.parse(_as_text(doc))
    assert dataclasses.replace(from_text, format="json", status_code=0, message="success") == \
        from_json


@pytest.mark.parametrize(("text", "needle"), [
    ("Operational Info\n----------------\nState : Active\nthis is not a field\n", "Key : value"),
    ("Operational Info\n----------------\nState : Active\n------\n", "without a section"),
    ("A\n---\nState : Active\nA\n---\n", "printed twice"),
    ("State : Active\nSpeed : 400G\n", "no section title"),
    ("-E- Failed to open device: mlx5_9\n", "mlxlink failed without output: Failed to open"),
    ("Supported Info\n--------------\nEnabled Link Speed : 0x1\n", "no mlxlink section"),
])
def test_malformed_text(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle) as exc:
        mlxlink.parse(text)
    assert exc.value.tool == "mlxlink"


def test_text_warnings_and_leading_prompt_lines() -> None:
    text = "user@host:~$ sudo mlxlink -d mlx5_0 -m -c\n-W- Cable is not supported\n" + \
        BF3.read_text()
    r = mlxlink.parse(text)
    assert r.ok and r.warning == "Cable is not supported"
    assert dataclasses.replace(r, warning=None) == mlxlink.parse(BF3.read_text())


def test_dr4_link_and_ber() -> None:
    r = mlxlink.parse(DR4.read_text())
    assert (r.ok, r.status_code, r.message, r.warning) == (True, 0, "success", None)
    assert (r.device, r.port) == (None, None)
    assert (r.fw_version, r.mft_version) == ("28.47.1088", "4.34.1-10")
    assert (r.state, r.physical_state, r.speed, r.width) == (
        "Active", "ETH_AN_FSM_ENABLE", "400G", "4x")
    assert r.link_up and r.width_lanes == 4
    assert r.fec == "Standard_RS-FEC - (544,514)"
    assert (r.loopback, r.auto_negotiation) == ("No Loopback", "ON")
    assert r.raw_ber == r.pre_fec_ber == 5e-10
    assert r.effective_ber == r.post_fec_ber == 0.0  # "15E-255": the no-errors sentinel
    assert (r.effective_errors, r.link_down, r.link_error_recovery) == (0, 0, 0)
    assert (r.symbol_ber, r.symbol_errors) == (None, None)  # Ethernet: IB-only fields absent
    assert r.minutes_since_clear == 2718.1
    assert (r.status_opcode, r.recommendation) == (0, "No issue was observed")
    assert r.sections == ("Module Info", "Operational Info", "Physical Counters and BER Info",
                          "Supported Info", "Tool Information", "Troubleshooting Info")


def test_dr4_module() -> None:
    m = mlxlink.parse(DR4.read_text()).module
    assert m is not None
    assert (m.identifier, m.cable_type, m.technology) == (
        "OSFP", "Optical Module (separated)", "1310 nm DFB laser")
    assert m.compliance == "IB NDR,400GBASE-DR4"
    assert (m.vendor, m.part_number, m.serial_number, m.revision, m.oui) == (
        "EXAMPLE", "OSFP-400G-DR4", "S00XXX000000", "1A", "Nvidia")
    assert (m.fw_version, m.wavelength_nm, m.ddm, m.state) == (
        "40.242.17", 1311.0, True, "Ready state")
    assert (m.fw_fault, m.datapath_fw_fault) == (False, False)
    assert m.temperature_c == 61.0 and m.temperature_range == mlxlink.Range(-10.0, 80.0)
    assert m.voltage_mv == 3235.5 and m.voltage_range == mlxlink.Range(2970.0, 3630.0)
    assert m.rx_power_range == mlxlink.Range(-9.914, 6.999)
    assert m.tx_power_range == mlxlink.Range(-6.904, 6.999)
    assert m.bias_range == mlxlink.Range(40.0, 480.0)
    assert m.temperature_range.contains(61.0) and not m.temperature_range.contains(81.0)


def test_dr4_lanes() -> None:
    lanes = mlxlink.parse(DR4.read_text()).lanes
    assert [ln.index for ln in lanes] == [0, 1, 2, 3]
    assert [ln.rx_power_dbm for ln in lanes] == [3.583, 3.253, 3.233, 2.658]
    assert [ln.tx_power_dbm for ln in lanes] == [2.193, 1.202, 1.708, 1.274]
    assert [ln.bias_ma for ln in lanes] == [265.504, 265.504, 248.416, 248.416]
    assert [ln.raw_ber for ln in lanes] == [1e-10, 1e-9, 4e-10, 5e-10]
    assert [ln.raw_errors for ln in lanes] == [3017647, 15132549, 7368641, 9233545]
    for ln in lanes:
        assert not (ln.rx_dark or ln.tx_dark)
        assert (ln.rx_los, ln.tx_los, ln.tx_fault, ln.rx_cdr_lol, ln.tx_cdr_lol) == (
            False, False, False, False, False)
        assert ln.datapath_state == "DPActivated"


def test_bytes_compact_json_and_caller_identity() -> None:
    text = DR4.read_text()
    compact = json.dumps(json.loads(text))
    ref = mlxlink.parse(text)
    assert mlxlink.parse(text.encode()) == ref
    assert mlxlink.parse(compact) == ref
    r = mlxlink.parse(compact, device="mlx5_4", port=1)
    assert (r.device, r.port) == ("mlx5_4", "1")
    assert dataclasses.replace(r, device=None, port=None) == ref


def test_failed_run_is_a_report_not_an_error() -> None:
    text = ('{\n\t"status" :\n\t{\n\t\t"code" : 1,\n\t\t"message" : "Failed to open device: '
            '\\"mlx5_9\\", No such file or directory"\n\t}\n}\n')
    r = mlxlink.parse(text, device="mlx5_9")
    assert not r.ok
    assert r.status_code == 1
    assert r.message == 'Failed to open device: "mlx5_9", No such file or directory'
    assert (r.device, r.state, r.raw_ber, r.module, r.lanes, r.sections) == (
        "mlx5_9", None, None, None, (), ())
    assert r.pre_fec_ber is None and not r.link_up


def test_failed_run_keeps_output_it_can_read() -> None:
    doc = _doc()
    doc["status"] = {"code": 1, "message": "Failed to open device"}
    r = mlxlink.parse(_dump(doc))
    assert (r.ok, r.status_code, r.message) == (False, 1, "Failed to open device")
    assert r.state == "Active" and r.raw_ber == 5e-10 and len(r.lanes) == 4
    doc["result"]["output"]["Physical Counters and BER Info"]["Raw Physical BER"] = "garbled"
    r = mlxlink.parse(_dump(doc))
    assert (r.ok, r.message, r.state, r.raw_ber) == (False, "Failed to open device", None, None)
    doc["result"] = {"output": "not an object"}
    with pytest.raises(ParseError, match="result.output"):
        mlxlink.parse(_dump(doc))


def test_status_code_as_string_and_warning() -> None:
    doc = _doc()
    doc["status"] = {"code": "2", "message": "\x1b[31mDevice is not supported\x1b[0m"}
    doc["result"]["warning"] = {"message": "Module is not plugged"}
    r = mlxlink.parse(_dump(doc))
    assert (r.ok, r.status_code, r.message, r.warning) == (
        False, 2, "Device is not supported", "Module is not plugged")


def test_warning_lines_before_the_json() -> None:
    text = "-W- Some warning from the tool\n" + DR4.read_text()
    assert mlxlink.parse(text) == mlxlink.parse(DR4.read_text())


def test_error_line_without_json() -> None:
    with pytest.raises(ParseError, match="mlxlink failed without output: Failed to open device"):
        mlxlink.parse('-E- Failed to open device: "mlx5_9", No such file or directory\n')


def test_dark_lanes_and_na_readings() -> None:
    text = _variant(Module_Info={
        "Rx Power Current [dBm]": "-inf,-inf,3.2,N/A [-9.914..6.999]",
        "Tx Power Current [dBm]": "N/A",
        "Bias Current [mA]": "265.504,N/A,248.416,248.416 [40..480]",
        "Temperature [C]": "N/A",
        "Voltage [mV]": "3235.5 [N/A..3630]",
        "Rx LOS [per lane]": {"values": ["1", "1", "0", "N/A"]},
    })
    r = mlxlink.parse(text)
    assert [ln.rx_power_dbm for ln in r.lanes] == [None, None, 3.2, None]
    assert [ln.rx_dark for ln in r.lanes] == [True, True, False, False]
    assert [ln.tx_power_dbm for ln in r.lanes] == [None] * 4
    assert not any(ln.tx_dark for ln in r.lanes)
    assert [ln.bias_ma for ln in r.lanes] == [265.504, None, 248.416, 248.416]
    assert [ln.rx_los for ln in r.lanes] == [True, True, False, None]
    assert r.module is not None
    assert r.module.rx_power_range == mlxlink.Range(-9.914, 6.999)
    assert r.module.tx_power_range is None
    assert (r.module.temperature_c, r.module.temperature_range) == (None, None)
    assert r.module.voltage_range == mlxlink.Range(None, 3630.0)
    assert r.module.voltage_range.contains(-5.0)


def test_ber_na_and_sentinel_everywhere() -> None:
    r = mlxlink.parse(_variant(Physical_Counters_and_BER_Info={
        "Raw Physical BER": "15E-255",
        "Effective Physical BER": "N/A",
        "Effective Physical Errors": "N/A",
        "Raw Physical BER Per Lane": {"values": ["15E-255", "2.5E-12", "N/A", "0"]},
    }))
    assert r.raw_ber == r.pre_fec_ber == 0.0
    assert (r.effective_ber, r.effective_errors) == (None, None)
    assert [ln.raw_ber for ln in r.lanes] == [0.0, 2.5e-12, None, 0.0]


def test_edr_style_comma_strings_and_ib_symbol_fields() -> None:
    r = mlxlink.parse(_variant(Physical_Counters_and_BER_Info={
        "Raw Physical Errors Per Lane": "0,12,0,7",
        "Raw Physical BER Per Lane": None,
        "Symbol Errors": "3",
        "Symbol BER": "1E-15",
    }))
    assert [ln.raw_errors for ln in r.lanes] == [0, 12, 0, 7]
    assert [ln.raw_ber for ln in r.lanes] == [None] * 4
    assert (r.symbol_errors, r.symbol_ber) == (3, 1e-15)


def test_lists_of_different_lengths_are_index_aligned() -> None:
    r = mlxlink.parse(_variant(Physical_Counters_and_BER_Info={
        "Raw Physical BER Per Lane": {"values": ["N/A"]},
        "Raw Physical Errors Per Lane": {"values": [str(i) for i in range(8)]},
    }))
    assert len(r.lanes) == 8
    assert [ln.raw_errors for ln in r.lanes] == list(range(8))
    assert r.lanes[5].rx_power_dbm is None and r.lanes[5].datapath_state is None
    assert r.lanes[3].rx_power_dbm == 2.658


def test_missing_sections_leave_none() -> None:
    doc = _doc()
    out = doc["result"]["output"]
    del out["Module Info"], out["Tool Information"], out["Troubleshooting Info"]
    r = mlxlink.parse(_dump(doc))
    assert (r.module, r.fw_version, r.recommendation, r.status_opcode) == (None, None, None, None)
    assert r.state == "Active" and r.effective_ber == 0.0
    assert [ln.raw_errors for ln in r.lanes] == [3017647, 15132549, 7368641, 9233545]
    assert r.lanes[0].rx_power_dbm is None
    del out["Physical Counters and BER Info"]
    r = mlxlink.parse(_dump(doc))
    assert (r.raw_ber, r.link_down, r.lanes) == (None, None, ())
    assert r.speed == "400G"


def test_keys_matched_ignoring_case_spaces_and_ansi() -> None:
    doc = _doc()
    out = doc["result"]["output"]
    op = out.pop("Operational Info")
    op["Physical  State"] = op.pop("Physical state")
    op["State"] = "\x1b[32mActive\x1b[0m"
    out["operational info"] = op
    r = mlxlink.parse(_dump(doc))
    assert (r.state, r.physical_state) == ("Active", "ETH_AN_FSM_ENABLE")


def test_status_missing_is_tolerated_when_output_present() -> None:
    doc = _doc()
    del doc["status"]
    r = mlxlink.parse(_dump(doc))
    assert (r.ok, r.status_code, r.message) == (True, None, None)
    assert r.raw_ber == 5e-10


@pytest.mark.parametrize(
    ("sections", "needle"),
    [
        ({"Physical_Counters_and_BER_Info": {"Raw Physical BER": "lots"}}, "not a number"),
        ({"Physical_Counters_and_BER_Info": {"Raw Physical BER": "-1E-3"}}, "not a BER"),
        ({"Physical_Counters_and_BER_Info": {"Effective Physical BER": "nan"}}, "not a number"),
        ({"Physical_Counters_and_BER_Info": {"Link Down Counter": "-1"}}, "not a count"),
        ({"Physical_Counters_and_BER_Info": {"Link Down Counter": "9" * 5000}}, "integer"),
        ({"Physical_Counters_and_BER_Info": {"Raw Physical Errors Per Lane": "1,x,3"}},
         "not a count"),
        ({"Physical_Counters_and_BER_Info": {"Raw Physical BER Per Lane": {"mask": "0x1"}}},
         "'values' list"),
        ({"Physical_Counters_and_BER_Info": {"Raw Physical BER Per Lane": ["1E-9"]}},
         "bare list"),
        ({"Physical_Counters_and_BER_Info": {"Link Down Counter": {"values": ["0"]}}},
         "not a scalar"),
        ({"Module_Info": {"Temperature [C]": "61 [cold..80]"}}, "not a number"),
        ({"Module_Info": {"Temperature [C]": "61 [-10..80"}}, "unreadable range"),
        ({"Module_Info": {"Rx Power Current [dBm]": "3.5,+inf [-9..6]"}}, "not a number"),
        ({"Module_Info": {"Rx Power Current [dBm]": "1e999 [-9..6]"}}, "finite"),
        ({"Module_Info": {"Tx Fault [per lane]": {"values": ["0", "maybe"]}}}, "not a flag"),
        ({"Module_Info": {"Tx Fault [per lane]": {"values": [["0"]]}}}, "not a scalar"),
        ({"Operational_Info": {"State": True}}, "not a scalar"),
    ],
)
def test_unreadable_values(sections: dict[str, dict[str, Any]], needle: str) -> None:
    with pytest.raises(ParseError, match=needle) as exc:
        mlxlink.parse(_variant(**sections))
    assert exc.value.tool == mlxlink.TOOL


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"status": {"code": 0, "message": "success"}}', "no mlxlink section"),
        ('{"result": {"output": {"Supported Info": {}}}, "status": {"code": 0}}',
         "no mlxlink section"),
        ('{"result": [], "status": {"code": 0}}', "'result' is a list"),
        ('{"status": "ok"}', "'status' is a str"),
        ('{"status": {"code": "x"}}', "status.code"),
        ('{"status": {"code": true}}', "status.code"),
        ('{"status": {"code": 1, "message": 5}}', "status.message"),
        ("[1, 2, 3]", "no '{'"),
        ('\n  {"status": {"code": 0}}\n[1]', "unexpected text after the JSON"),
        ('{"jobs": [], "fio version": "fio-3.33"}', "no 'status' or 'result'"),
        ('{"status": {"code": 0}} trailing', "unexpected text after the JSON"),
        ("[" * 100_000 + "]" * 100_000, "no '{'"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid JSON"),
        ("{" + '"a":{' * 100_000 + "}" * 100_001, "invalid JSON"),
    ],
)
def test_malformed_structure(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle):
        mlxlink.parse(text)


def test_empty_input() -> None:
    for text in ("", "\n \t\n", b""):
        with pytest.raises(ParseError, match="empty") as exc:
            mlxlink.parse(text)
        assert exc.value.tool == "mlxlink"


def test_random_bytes() -> None:
    data = random.Random(0).randbytes(4096)
    with pytest.raises(ParseError, match="binary"):
        mlxlink.parse(data)
    with pytest.raises(ParseError, match="NUL"):
        mlxlink.parse(data.decode("latin-1"))
    rng = random.Random(0)
    printable = "".join(rng.choice(string.printable) for _ in range(4096))
    with pytest.raises(ParseError) as exc:
        mlxlink.parse(printable)
    assert exc.value.tool == mlxlink.TOOL


@pytest.mark.parametrize("cut", [1, 10, 100, 1000, 2500, 4000, -3, -2])
def test_truncated_json(cut: int) -> None:
    text = DR4.read_text().rstrip()
    with pytest.raises(ParseError, match="invalid JSON"):
        mlxlink.parse(text[:cut])


@pytest.mark.parametrize(
    "path",
    [ETHTOOL, *real_files("09-lspci"), *real_files("01-nvidia-smi-xml"),
     *real_files("04-infiniband", "ibstat*")],
    ids=lambda p: p.name,
)
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        mlxlink.parse(path.read_text())
    assert exc.value.tool == mlxlink.TOOL


def test_deepcopy_of_real_document_unchanged_by_parse() -> None:
    doc = _doc()
    before = copy.deepcopy(doc)
    mlxlink.parse(_dump(doc))
    assert doc == before


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    outcomes = mutation_outcomes(mlxlink.parse, path.read_text(), mlxlink.TOOL, rounds=400)
    assert outcomes == {"parsed", "error"}


def test_mutated_values_raise_only_parse_error() -> None:
    """Every field of the real document replaced by odd values: a report or ParseError."""
    odd: list[Any] = ["", "N/A", "-inf", "1,2", "[1..2]", "x [..]", "15E-255", 3, 2.5, None,
                      True, [], {}, {"values": None}, {"values": [None]}, "\x1b[31m0\x1b[0m"]
    doc = _doc()
    rng = random.Random(1)
    for name, section in doc["result"]["output"].items():
        for key in section:
            for value in odd:
                mutated = copy.deepcopy(doc)
                mutated["result"]["output"][name][key] = value
                if rng.random() < 0.3:
                    mutated["status"]["code"] = 1
                try:
                    mlxlink.parse(json.dumps(mutated))
                except ParseError as exc:
                    assert exc.tool == mlxlink.TOOL


#: Each real sample's FEC text, the mode it names, and the link's Gb/s per lane and per port.
_LINKS = {
    DR4: ("Standard_RS-FEC - (544,514)", "rs544", 100.0, 400.0),
    BF3: ("Standard RS-FEC - RS(528,514)", "rs528", 25.0, 100.0),
    CX6: ("RS-FEC - (544,514) + PLR", "rs544", 50.0, 100.0),
    CX7: ("Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)", "rs272", 100.0, 400.0),
}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_names_its_fec_mode_and_lane_speed(path: Path) -> None:
    r = mlxlink.parse(path.read_text())
    assert (r.fec, r.fec_mode, r.lane_gbps, r.port_gbps) == _LINKS[path]


@pytest.mark.parametrize(("fec", "mode"), [
    ("Standard_RS-FEC - (544,514)", "rs544"),
    ("Interleaved_Standard_RS-FEC_(544,514)", "rs544"),
    ("RS-FEC - (544,514) + PLR", "rs544"),
    ("Standard RS-FEC - RS(528,514)", "rs528"),
    ("Ethernet_Consortium_LL_50G_RS_FEC_PLR -(272,257+1)", "rs272"),
    ("No FEC", "none"), ("No_FEC", "none"),
    ("Firecode", "firecode"), ("Firecode_FEC", "firecode"),
    ("Standard RS-FEC", None),  # which Reed-Solomon code: not said, so not assumed
    ("N/A", None), ("Zebra_FEC", None), (None, None),
])
def test_fec_text_to_mode(fec: str | None, mode: str | None) -> None:
    fields = {"FEC": fec} if fec is not None else {"FEC": None}
    assert mlxlink.parse(_variant(Operational_Info=fields)).fec_mode == mode


@pytest.mark.parametrize(("speed", "width", "lane", "port"), [
    ("IB-NDR", "4x", 100.0, 400.0), ("IB-HDR", "2x", 50.0, 100.0), ("IB-EDR", "4x", 25.0, 100.0),
    ("IB-FDR", "4x", 14.0, 56.0), ("IB-XDR", "1x", 200.0, 200.0), ("400G", "4x", 100.0, 400.0),
    ("200G", "4x", 50.0, 200.0), ("400G", None, None, None), ("N/A", "4x", None, None),
    ("fast", "4x", None, None),
])
def test_lane_speed(speed: str, width: str | None, lane: float | None,
                    port: float | None) -> None:
    r = mlxlink.parse(_variant(Operational_Info={"Speed": speed, "Width": width}))
    assert (r.lane_gbps, r.port_gbps) == (lane, port)
