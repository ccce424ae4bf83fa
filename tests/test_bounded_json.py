"""bounded_json: hostile JSON is a ValueError naming the limit, in linear time, never RecursionError."""

import json
import time

import pytest

from subsetsaver import bounded_json


def test_reads_ordinary_json_as_json_does():
    text = '{"a": [1, 2.5, "x[{"], "b": {"c": null, "d": "\\"]"}}'
    assert bounded_json.loads(text) == json.loads(text)
    assert bounded_json.loads(text.encode("utf-8")) == json.loads(text)


@pytest.mark.parametrize("text, depth", [
    ("1", 0), ("[]", 1), ('{"a": [[{}]]}', 4), ('["[[[[", "{{{{"]', 1), ('["\\\\", ["\\"["]]', 2),
])
def test_depth_ignores_brackets_inside_strings(text, depth):
    assert bounded_json.nesting_depth(text) == depth


def test_deep_nesting_is_refused_by_its_limit():
    with pytest.raises(ValueError) as caught:
        bounded_json.loads("[" * 100_000 + "]" * 100_000)
    assert str(caught.value) == "it is nested 100,000 deep; at most 64 levels are read"
    assert bounded_json.loads("[" * 64 + "]" * 64) is not None
    with pytest.raises(ValueError, match="nested 65 deep"):
        bounded_json.loads("[" * 65 + "]" * 65)


def test_size_and_encoding_limits():
    with pytest.raises(ValueError) as caught:
        bounded_json.loads("[1]" + " " * 100, max_bytes=50)
    assert str(caught.value) == "it is 103 bytes; at most 50 are read"
    with pytest.raises(ValueError) as caught:
        bounded_json.loads(b'{"a": "\xff"}')
    assert str(caught.value) == "it is not UTF-8 (byte 7)"


def test_unclosed_strings_do_not_make_the_scan_quadratic():
    # Every quote opens a string that never closes: a scan that retried from each quote would take minutes.
    text = '"\\"' * 2_000_000
    started = time.perf_counter()
    with pytest.raises(ValueError):
        bounded_json.loads(text)
    assert time.perf_counter() - started < 30
