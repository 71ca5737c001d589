"""`gpu-platform topology` as a function: the DGX-2 file, this machine, JSON, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.topology_command import topology_command
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError
from gpu_platform.ports.outbound.topology_probe import TopologyError
from gpu_platform.testing.system import require_shared, require_tool


def test_dgx2_file_shows_the_nv6_matrix_with_cpu_and_numa_affinity() -> None:
    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    text = topology_command(xml=str(xml))
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("GPU0"))
    expected = [f"GPU{i}" for i in range(16)] + ["CPU", "Affinity", "NUMA", "Affinity"]
    assert header.split() == expected
    row0 = next(line for line in lines if line.startswith("GPU0 "))
    assert row0.split() == ["GPU0", "X", *["NV6"] * 15, "0-1", "0"]
    row15 = next(line for line in lines if line.startswith("GPU15 "))
    assert row15.split() == ["GPU15", *["NV6"] * 15, "X", "24-25", "1"]
    assert "NVSwitch fabric: 12 switch(es)" in text
    assert "PIX  = Connection traversing at most a single PCIe switch" in text


def test_dgx2_json_carries_gpus_matrix_and_switches() -> None:
    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    data = json.loads(topology_command(xml=str(xml), as_json=True))
    (host,) = data["hosts"]
    assert len(host["gpus"]) == 16 and len(host["nvswitches"]) == 12
    assert host["matrix"]["rows"]["GPU3"][3] == "X"
    assert host["matrix"]["rows"]["GPU3"][4] == "NV6"
    assert host["numa_distances"] == [[10, 21], [21, 10]]


def test_this_machine_shows_its_real_view_and_the_simulated_fallback() -> None:
    text = topology_command()
    assert "== this host" in text
    if "SIMULATED" in text.splitlines()[0]:
        assert "== SIMULATED fallback node node-0 (sim:dgx-a100)" in text
        assert "auto: no GPU found" in text
        real = text.split("== this host", 1)[1].split("== SIMULATED", 1)[0]
        assert "GPU matrix: no GPU on this host" in real


def test_this_machine_real_view_comes_from_lstopo_when_installed() -> None:
    require_tool("lstopo", "hwloc-nox")
    data = json.loads(topology_command(as_json=True))
    real = data["hosts"][0]
    assert real["source"] == "hwloc:lstopo --of xml"
    numa_dir = Path("/sys/devices/system/node")
    if numa_dir.is_dir():
        expected = len([d for d in numa_dir.glob("node[0-9]*")])
        assert len(real["numa_nodes"]) == expected


def test_node_filter_keeps_one_node_and_names_the_others_when_missing() -> None:
    data = json.loads(topology_command(node="node-0", as_json=True, vendors={}))
    assert [h["node"] for h in data["hosts"]] == ["node-0"]
    with pytest.raises(DiscoveryError, match=r"no node 'nope' in this view \(known: .*node-0"):
        topology_command(node="nope", vendors={})


def test_a_malformed_xml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.xml"
    bad.write_text("<topology version='2.0'><object type='Machine'>")
    with pytest.raises(TopologyError, match=r"broken\.xml: not well-formed XML"):
        topology_command(xml=str(bad))
