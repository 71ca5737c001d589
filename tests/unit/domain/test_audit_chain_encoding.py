"""`chain_entry` encodes each half of an entry once; its line and hash are still exactly the
canonical JSON (sorted keys, no spaces) of the fields, `seq`, `prev` and `hash`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.audit_chain import GENESIS, chain_entry, verify


def _reference(seq: int, prev: str, fields: dict[str, Any]) -> tuple[str, str]:
    def canonical(body: dict[str, Any]) -> str:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    body = {"seq": seq, "prev": prev, **fields}
    digest = hashlib.sha256(canonical(body).encode()).hexdigest()
    return canonical({**body, "hash": digest}), digest


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
_names = st.text().filter(lambda k: k not in ("seq", "prev", "hash"))


@settings(max_examples=40)
@given(st.integers(1, 10**9), st.dictionaries(_names, _values, max_size=8))
def test_an_entry_is_the_canonical_json_of_its_fields_seq_prev_and_hash(
    seq: int, fields: dict[str, Any]
) -> None:
    assert chain_entry(seq, GENESIS, fields) == _reference(seq, GENESIS, fields)


def test_fields_sorting_before_and_after_hash_chain_and_verify() -> None:
    prev, lines = GENESIS, []
    for i, fields in enumerate(({}, {"a": 1}, {"z": "x"}, {"action": "job.submit", "zz": [1]})):
        before = prev
        line, prev = chain_entry(i + 1, before, fields)
        assert (line, prev) == _reference(i + 1, before, fields)
        lines.append(line)
    assert verify(lines, (4, prev)) == 4
