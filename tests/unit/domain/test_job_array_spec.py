"""Slurm's array syntax: ranges, lists, steps and the `%N` throttle, and its clear refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job_array import (
    ArraySpec,
    ArrayTask,
    array_env,
    format_array,
    parse_array,
    split_task_id,
    task_id,
)


@pytest.mark.parametrize(
    ("text", "indices", "throttle"),
    [
        ("0-999%64", tuple(range(1000)), 64),
        ("1,3,5", (1, 3, 5), 0),
        ("0-15:4", (0, 4, 8, 12), 0),
        ("7", (7,), 0),
        ("5,1,3-4,3", (1, 3, 4, 5), 0),
        (" 0-2 %1", (0, 1, 2), 1),
    ],
)
def test_the_slurm_forms_read_as_sorted_unique_indices(
    text: str, indices: tuple[int, ...], throttle: int
) -> None:
    array = parse_array(text)
    assert (array.indices, array.throttle) == (indices, throttle)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no task indices"),
        ("%4", "no task indices"),
        ("5-3", "runs backwards"),
        ("0-8:0", "step"),
        ("a-b", "is not an index"),
        ("1,,2", "is not an index"),
        ("-1", "is not an index"),
        ("0-1000000", "above the largest allowed (999999)"),
        ("0-9%0", "throttle"),
        ("0-9%x", "throttle"),
        ("0-9%-2", "throttle"),
    ],
)
def test_bad_specs_are_refused_naming_the_array_field(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_array(text)
    assert caught.value.field == "array"
    assert says in str(caught.value)


def test_the_largest_index_is_configurable() -> None:
    assert parse_array("0-9", max_size=10).last == 9
    with pytest.raises(InvalidRequest, match="above the largest allowed"):
        parse_array("10", max_size=10)


def test_formatting_writes_runs_as_ranges_and_steps() -> None:
    assert format_array(parse_array("1,3,5,7")) == "1-7:2"
    assert format_array(parse_array("0-3,10,20%2")) == "0-3,10,20%2"
    assert format_array(ArraySpec((0, 2, 3))) == "0,2-3"
    assert format_array(ArraySpec((4, 5))) == "4-5"


def test_task_ids_are_the_array_id_and_index_like_slurm() -> None:
    assert task_id("j-abc", 7) == "j-abc_7"
    assert split_task_id("j-abc_7") == ("j-abc", 7)
    assert split_task_id("j-abc") is None
    assert split_task_id("j_x") is None


def test_a_task_sees_its_index_in_our_names_and_slurms() -> None:
    env = dict(array_env(ArrayTask("j-1", 8, parse_array("4-12:4%2"))))
    assert env == {
        "ARRAY_JOB_ID": "j-1",
        "ARRAY_TASK_ID": "8",
        "SLURM_ARRAY_JOB_ID": "j-1",
        "SLURM_ARRAY_TASK_ID": "8",
        "SLURM_ARRAY_TASK_COUNT": "3",
        "SLURM_ARRAY_TASK_MIN": "4",
        "SLURM_ARRAY_TASK_MAX": "12",
    }


arrays = st.builds(
    ArraySpec,
    st.lists(st.integers(0, 5000), min_size=1, max_size=60, unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
    st.integers(0, 100),
)


@given(arrays)
def test_parsing_what_was_formatted_gives_the_same_array(array: ArraySpec) -> None:
    assert parse_array(format_array(array)) == array


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 50), st.integers(1, 9)), min_size=1),
    st.integers(1, 500),
)
def test_parsed_indices_are_sorted_unique_and_the_throttle_is_kept(
    items: list[tuple[int, int, int]], throttle: int
) -> None:
    text = ",".join(f"{low}-{low + span}:{step}" for low, span, step in items)
    array = parse_array(f"{text}%{throttle}")
    expected = sorted({i for low, span, step in items for i in range(low, low + span + 1, step)})
    assert list(array.indices) == expected
    assert array.throttle == throttle
    assert array.count == len(set(array.indices))
