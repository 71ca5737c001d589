from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.sim import (
    FileGpuDiscovery,
    SimulatedGpuDiscovery,
    load_inventory_file,
)
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError


def test_the_default_is_one_eight_gpu_node_over_two_numa_nodes() -> None:
    inv = SimulatedGpuDiscovery().discover()
    (node,) = inv.nodes
    assert inv.simulated and inv.source == "sim"
    assert [g.numa_node for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [len(n.cpus) for n in node.numa_nodes] == [64, 64]
    assert all(g.model == "A100-SXM4-80GB" and g.memory_bytes == 80 << 30 for g in node.gpus)
    assert any("SIMULATED" in note for note in inv.notes)


def test_a_toml_inventory_describes_heterogeneous_nodes(tmp_path: Path) -> None:
    path = tmp_path / "inv.toml"
    path.write_text(
        '[[nodes]]\nname = "a"\ngpus = 4\nnuma_nodes = 2\nlabels = { rack = "r1" }\n'
        '[[nodes]]\nname = "b"\nmodel = "H100-SXM5-80GB"\n'
        "gpus = [{ index = 0, numa = 1 }, { index = 3, numa = 0, memory_gib = 94 }]\n"
    )
    inv = FileGpuDiscovery(path).discover()
    a, b = inv.nodes
    assert [g.numa_node for g in a.gpus] == [0, 0, 1, 1] and a.labels == (("rack", "r1"),)
    assert [(g.index, g.numa_node) for g in b.gpus] == [(0, 1), (3, 0)]
    assert b.gpu(3).memory_bytes == 94 << 30 and b.gpu(0).model == "H100-SXM5-80GB"
    assert inv.simulated and str(path) in inv.source


def test_a_yaml_inventory_reads_the_same(tmp_path: Path) -> None:
    toml, yaml = tmp_path / "i.toml", tmp_path / "i.yaml"
    toml.write_text('[[nodes]]\nname = "a"\ngpus = 2\n')
    yaml.write_text("nodes:\n  - name: a\n    gpus: 2\n")
    assert load_inventory_file(toml) == load_inventory_file(yaml)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("nodes = []\n", "non-empty 'nodes'"),
        ("[[nodes]]\ngpus = 2\n", "nodes[0] needs 'name'"),
        ('[[nodes]]\nname = "a"\ngpus = -1\n', "nodes[0]"),
        ('[[nodes]]\nname = "a"\ngpus = 1\ncolour = "red"\n', "colour"),
        ('[[nodes]]\nname = "a"\ngpus = 1\nvendor = "acme"\n', "acme"),
        ('[[nodes]]\nname = "a"\ngpus = 1\n[[nodes]]\nname = "a"\ngpus = 1\n', "duplicate"),
        ("nodes = [", "not valid toml"),
    ],
)
def test_bad_inventory_files_name_the_file_and_the_entry(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "inv.toml"
    path.write_text(text)
    with pytest.raises(DiscoveryError) as err:
        load_inventory_file(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_a_missing_inventory_file_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="No such file"):
        FileGpuDiscovery(tmp_path / "missing.toml").discover()
