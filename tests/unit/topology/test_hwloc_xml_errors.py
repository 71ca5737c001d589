"""Malformed or unsupported hwloc XML names the file and the element."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.adapters.outbound.hwloc.xml_parser import parse_hwloc_xml, parse_mask
from gpu_platform.ports.outbound.topology_probe import TopologyError

HEAD = '<?xml version="1.0"?>\n<topology version="2.0">\n'
MACHINE = '<object type="Machine" os_index="0" cpuset="0x3" nodeset="0x1" gp_index="1">\n'


def doc(body: str) -> str:
    return HEAD + MACHINE + body + "</object>\n</topology>\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.xml"
    path.write_text(text)
    return path


def test_a_truncated_file_is_reported_as_not_well_formed_with_its_name(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + MACHINE)
    with pytest.raises(TopologyError, match=r"bad\.xml: not well-formed XML"):
        HwlocTopologyProbe(path).probe()


def test_hwloc_3_format_is_refused_with_the_version_named(tmp_path: Path) -> None:
    path = write(tmp_path, doc("").replace('version="2.0"', 'version="3.0"'))
    with pytest.raises(TopologyError, match=r'bad\.xml: <topology version="3.0">: unsupported'):
        HwlocTopologyProbe(path).probe()


def test_a_foreign_root_element_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"x\.xml: root element <system>"):
        parse_hwloc_xml("<system/>", "x.xml")


def test_a_bad_pci_type_names_the_element() -> None:
    body = (
        '<object type="Bridge" gp_index="2" bridge_type="0-1" bridge_pci="0000:[00-01]">'
        '<object type="PCIDev" gp_index="3" pci_busid="0000:01:00.0" pci_type="garbage"/>'
        "</object>"
    )
    with pytest.raises(
        TopologyError, match=r'x\.xml: <object type="PCIDev" gp_index="3".*pci_type'
    ):
        parse_hwloc_xml(doc(body), "x.xml")


def test_an_object_without_a_type_names_the_element() -> None:
    with pytest.raises(TopologyError, match=r'x\.xml: <object gp_index="9">: object without'):
        parse_hwloc_xml(doc('<object gp_index="9"/>'), "x.xml")


def test_a_distance_matrix_of_the_wrong_size_names_the_element() -> None:
    text = doc('<object type="NUMANode" os_index="0" cpuset="0x3" nodeset="0x1" gp_index="2"/>')
    text = text.replace(
        "</topology>",
        '<distances2 type="NUMANode" nbobjs="1" kind="5" indexing="os">'
        '<indexes length="2">0 </indexes><u64values length="6">10 20 </u64values>'
        "</distances2></topology>",
    )
    with pytest.raises(TopologyError, match=r"<distances2 .*2 values for 1x1 objects"):
        parse_hwloc_xml(text, "x.xml")


def test_a_missing_file_is_a_topology_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"nope\.xml"):
        HwlocTopologyProbe(tmp_path / "nope.xml").probe()


def test_a_minimal_document_parses_to_one_numa_node_and_no_gpu() -> None:
    text = doc('<object type="NUMANode" os_index="0" cpuset="0x3" nodeset="0x1" gp_index="2"/>')
    topo = parse_hwloc_xml(text, "x.xml", fallback_node="mini")
    assert topo.node == "mini"
    assert [n.cpus for n in topo.numa_nodes] == [(0, 1)]
    assert topo.gpus == ()
    assert topo.numa_distances == ((10,),)


def test_bitmaps_read_most_significant_word_first() -> None:
    assert parse_mask("0x00000003") == {0, 1}
    assert parse_mask("0x00000001,0x00000000") == {32}
    assert parse_mask("0x00000303,0x03030000,,0x03030303") == {
        0,
        1,
        8,
        9,
        16,
        17,
        24,
        25,
        80,
        81,
        88,
        89,
        96,
        97,
        104,
        105,
    }
    assert parse_mask("") == frozenset()
