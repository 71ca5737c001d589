"""The audit writer chains entries in the order they were appended, so the file is exactly
what chaining each entry at its `append` would have written; what `chain_entry` refuses is
still refused at `append`, and an entry is what its fields were when appended."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.storage.audit_file import JsonlAuditLog, verify_file
from gpu_platform.domain.model.audit_chain import GENESIS, chain_entry

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=5,
)
_fields = st.dictionaries(
    st.text(max_size=8).filter(lambda k: k not in ("seq", "prev", "hash")), _values, max_size=5
)


def _chained(entries: list[dict[str, Any]]) -> str:
    prev, lines = GENESIS, []
    for seq, fields in enumerate(entries, start=1):
        line, prev = chain_entry(seq, prev, fields)
        lines.append(line + "\n")
    return "".join(lines)


@settings(max_examples=25, deadline=None)
@given(st.lists(_fields, max_size=12), st.integers(0, 12))
def test_the_file_is_the_entries_chained_in_append_order(
    entries: list[dict[str, Any]], flush_after: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "audit.jsonl"
        log = JsonlAuditLog(path)
        for n, fields in enumerate(entries):
            log.append(fields)
            if n == flush_after:  # the writer's batches fall anywhere
                log.flush()
        log.close()
        assert path.read_text(encoding="utf-8") == _chained(entries)
        assert verify_file(path) == len(entries)


def test_a_refused_entry_is_refused_at_append_and_the_chain_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)
    log.append({"action": "first"})
    with pytest.raises(ValueError, match="may not be named"):
        log.append({"action": "x", "hash": "forged"})
    with pytest.raises(TypeError):
        log.append({"action": "x", "when": object()})
    with pytest.raises(TypeError):
        log.append({"action": "x", 3: "a key JSON cannot sort with text"})  # type: ignore[dict-item]
    log.append({"action": "second"})
    log.close()
    assert path.read_text(encoding="utf-8") == _chained([{"action": "first"}, {"action": "second"}])


def test_an_entry_keeps_the_values_it_was_appended_with(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path, head_every=3600)
    nodes = ["n1"]
    fields: dict[str, Any] = {"action": "drain", "nodes": nodes}
    log.append(fields)
    nodes.append("n2")  # the caller changes its values afterwards
    fields["action"] = "changed"
    log.close()
    assert path.read_text(encoding="utf-8") == _chained([{"action": "drain", "nodes": ["n1"]}])
