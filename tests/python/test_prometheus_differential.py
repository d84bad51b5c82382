"""pyepp.parse_prometheus against prometheus_client's text parser, family by family.

Inputs: every real capture in ${EPP_SHARED_FIXTURES}/metrics/ and the valid synthetic texts
below, each aimed at one corner of the text format. For every input prometheus_client accepts,
both parsers must give the same families (name, type, documentation) and the same samples
(name, labels, value with NaN equal to NaN, timestamp). The fixture with literal `...` lines is
invalid: both parsers must reject it, and lenient parsing must skip exactly those lines.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Tuple

import pytest
from conftest import shared_fixtures_dir

import pyepp

prometheus_parser = pytest.importorskip("prometheus_client.parser")

ELIDED_FIXTURE = "vllm-v1-design-doc-example-elided.prom"

SYNTHETIC: List[Tuple[str, str]] = [
    (
        "label-escapes",
        '# TYPE esc gauge\n'
        'esc{path="C:\\\\dir\\\\file",quote="say \\"hi\\"",nl="a\\nb",all="\\\\\\"\\n"} 1\n'
        'esc{trailing="ends with backslash \\\\"} 2\n'
        'esc{empty=""} 3\n',
    ),
    (
        "label-values-with-commas-braces-equals",
        '# TYPE odd gauge\n'
        'odd{a="x,y",b="{z}",c="k=v",d="}{",e="a=\\"b\\",c={d}"} 1\n'
        'odd{url="/v1/chat?x=1&y={2}",list="a, b, c"} 2\n',
    ),
    (
        "spaces-around-label-syntax",
        '# TYPE sp gauge\n'
        'sp{a="1", b="2",  c="3"} 1\n'
        'sp{ a="1" , b = "2" } 2\n'
        'sp {a="1"} 3\n'
        'sp{a="1",} 4\n'
        'sp{} 5\n',
    ),
    (
        "timestamps",
        '# TYPE ts gauge\n'
        'ts{a="1"} 1 1395066363000\n'
        'ts{a="2"} 2 0\n'
        'ts{a="3"} 3 -1500\n'
        'ts 4 1700000000123\n',
    ),
    (
        "special-values",
        '# TYPE sv gauge\n'
        'sv{v="nan"} NaN\n'
        'sv{v="pinf"} +Inf\n'
        'sv{v="ninf"} -Inf\n'
        'sv{v="zero"} 0\n'
        'sv{v="negzero"} -0.0\n'
        'sv{v="plus"} +3.5\n',
    ),
    (
        "exponents",
        '# TYPE ex gauge\n'
        'ex{v="a"} 1e3\n'
        'ex{v="b"} 1.5E-3\n'
        'ex{v="c"} -2.5e+10\n'
        'ex{v="d"} 8.128902e+06\n'
        'ex{v="e"} 1.790053209e+09\n'
        'ex{v="f"} 1e400\n'
        'ex{v="g"} 1e-400\n'
        'ex{v="h"} 4.9e-324\n'
        'ex{v="i"} .5\n'
        'ex{v="j"} 5.\n'
        'ex{v="k"} 123456789012345678901234567890\n',
    ),
    (
        "no-type-lines",
        'plain 1\n'
        'plain 2\n'
        'with_labels{a="b"} 3\n'
        'with_labels{a="c"} 4\n'
        'other_total 5\n',
    ),
    (
        "help-only-family",
        '# HELP documented A family with HELP and no TYPE.\n'
        'documented{a="1"} 1\n'
        'documented{a="2"} 2\n'
        'undocumented 3\n',
    ),
    (
        "histogram",
        '# HELP req_seconds Request latency.\n'
        '# TYPE req_seconds histogram\n'
        'req_seconds_bucket{le="0.1"} 1\n'
        'req_seconds_bucket{le="0.5"} 3\n'
        'req_seconds_bucket{le="+Inf"} 4\n'
        'req_seconds_sum 1.25\n'
        'req_seconds_count 4\n'
        'req_seconds_bucket{le="0.1",path="/b"} 0\n'
        'req_seconds_bucket{le="+Inf",path="/b"} 0\n'
        'req_seconds_sum{path="/b"} 0\n'
        'req_seconds_count{path="/b"} 0\n',
    ),
    (
        "summary",
        '# HELP rpc_seconds RPC latency.\n'
        '# TYPE rpc_seconds summary\n'
        'rpc_seconds{quantile="0.5"} 0.05\n'
        'rpc_seconds{quantile="0.99"} 0.2\n'
        'rpc_seconds_sum 17.5\n'
        'rpc_seconds_count 300\n',
    ),
    (
        "counter-with-total",
        '# HELP http_requests_total Requests served.\n'
        '# TYPE http_requests_total counter\n'
        'http_requests_total{code="200"} 1027 1395066363000\n'
        'http_requests_total{code="400"} 3\n',
    ),
    (
        "counter-without-total",
        '# HELP restarts Process restarts.\n'
        '# TYPE restarts counter\n'
        'restarts 2\n'
        'restarts{reason="oom"} 1\n',
    ),
    (
        "counter-type-without-total-samples-with-total",
        '# TYPE jobs counter\n'
        'jobs_total 4\n',
    ),
    (
        "crlf-line-ends",
        '# HELP crlf_gauge A gauge.\r\n# TYPE crlf_gauge gauge\r\ncrlf_gauge{a="b"} 1\r\n'
        'crlf_gauge{a="c"} 2 1000\r\n\r\n# TYPE crlf_count counter\r\ncrlf_count_total 3\r\n',
    ),
    (
        "blank-lines-and-indentation",
        '\n\n# TYPE bl gauge\n\n   \nbl 1\n\t\n  bl{a="x"} 2  \n\n',
    ),
    (
        "eof-terminator",
        '# TYPE eofg gauge\neofg 1\n# EOF\n',
    ),
    (
        "comments-and-type-before-help",
        '# just a comment\n'
        '#HELP not_a_help_line because no space\n'
        '# TYPE tb gauge\n'
        '# HELP tb Help after type.\n'
        '# another comment inside the family\n'
        'tb 1\n',
    ),
    (
        "help-escapes",
        '# HELP he Backslash \\\\ and newline \\n and a literal \\t and quote \\".\n'
        '# TYPE he gauge\n'
        'he 1\n'
        '# HELP he_empty\n'
        '# TYPE he_empty gauge\n'
        'he_empty 2\n',
    ),
    (
        "untyped-and-unknown-type-lines",
        '# TYPE ut untyped\n'
        'ut 1\n'
        '# TYPE uk unknown\n'
        'uk 2\n',
    ),
    (
        "tabs-as-separators",
        '# TYPE tab gauge\n'
        'tab\t1\n'
        'tab{a="b"}\t2\n',
    ),
    (
        "colons-digits-underscores-in-names",
        '# TYPE vllm:num_requests_running gauge\n'
        'vllm:num_requests_running{model_name="m",_hidden="x",a1_b2="y"} 3\n'
        '# TYPE _leading_underscore gauge\n'
        '_leading_underscore 1\n',
    ),
    (
        "unicode-in-help-and-labels",
        '# HELP uni Ünïcödé help — 日本語.\n'
        '# TYPE uni gauge\n'
        'uni{name="Grüße",emoji="🙂"} 1\n',
    ),
    (
        "sample-not-in-open-family-becomes-singleton",
        '# TYPE fam gauge\n'
        'fam 1\n'
        'stray 2\n'
        'fam 3\n'
        '# TYPE hist histogram\n'
        'hist_bucket{le="+Inf"} 1\n'
        'hist 5\n'
        'hist_count 1\n',
    ),
    (
        "family-without-samples",
        '# HELP empty_family Nothing yet.\n'
        '# TYPE empty_family histogram\n'
        '# HELP next_family Next.\n'
        '# TYPE next_family gauge\n'
        'next_family 1\n',
    ),
    (
        "duplicate-label-name-last-wins",
        '# TYPE dup gauge\n'
        'dup{a="1",a="2"} 1\n',
    ),
    (
        "same-family-twice",
        '# TYPE twice gauge\n'
        'twice 1\n'
        '# TYPE other gauge\n'
        'other 2\n'
        '# TYPE twice gauge\n'
        'twice 3\n',
    ),
    (
        "no-trailing-newline",
        '# TYPE nt gauge\nnt{a="b"} 42',
    ),
    (
        "value-spellings-go-accepts",
        '# TYPE spell gauge\n'
        'spell{v="a"} Inf\n'
        'spell{v="b"} -inf\n'
        'spell{v="c"} nan\n'
        'spell{v="d"} +Infinity\n'
        'spell{v="e"} 007\n',
    ),
    (
        "runs-of-blanks",
        '# HELP runs   Help   with    inner  runs.  \n'
        '#   TYPE    runs    gauge\n'
        'runs{a="",b=""}    1     1000\n'
        'runs   2\n',
    ),
    (
        "gauge-named-total",
        '# TYPE bytes_total gauge\n'
        'bytes_total 10\n',
    ),
    (
        "empty-input",
        '',
    ),
]


def _fixture_params() -> List[Any]:
    folder = shared_fixtures_dir() / "metrics"
    if not folder.is_dir():
        reason = f"shared fixtures not found at {folder} (set EPP_SHARED_FIXTURES)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="shared-fixtures-absent")]
    files = sorted(p for p in folder.iterdir() if p.is_file())
    return [pytest.param(p, id=p.name) for p in files]


def _reference(text: str) -> List[Any]:
    return list(prometheus_parser.text_string_to_metric_families(text))


def _same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def assert_same_families(ours: List[pyepp.MetricFamily], theirs: List[Any]) -> None:
    assert [(f.name, f.type) for f in ours] == [(f.name, f.type) for f in theirs]
    for mine, ref in zip(ours, theirs):
        where = f"family {ref.name}"
        assert mine.documentation == ref.documentation, where
        assert mine.help == ref.documentation, where
        assert len(mine.samples) == len(ref.samples), where
        for i, (s, r) in enumerate(zip(mine.samples, ref.samples)):
            at = f"{where}, sample {i} ({r.name}{r.labels})"
            assert s.name == r.name, at
            assert s.labels == r.labels, at
            assert list(s.labels) == list(r.labels), f"{at}: label order"
            assert isinstance(s.value, float), at
            assert _same_value(s.value, r.value), f"{at}: {s.value!r} != {r.value!r}"
            assert s.timestamp == r.timestamp, at


@pytest.mark.parametrize("text", [pytest.param(t, id=name) for name, t in SYNTHETIC])
def test_synthetic_inputs_match_prometheus_client(text: str) -> None:
    theirs = _reference(text)  # every synthetic input is valid; prometheus_client must accept it
    ours = pyepp.parse_prometheus(text)
    assert ours.skipped_lines == 0
    assert_same_families(ours, theirs)
    # Lenient parsing of valid text changes nothing.
    assert_same_families(pyepp.parse_prometheus(text, lenient=True), theirs)


@pytest.mark.parametrize("path", _fixture_params())
def test_real_captures_match_prometheus_client(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if path.name == ELIDED_FIXTURE:
        with pytest.raises(ValueError):
            _reference(text)
        with pytest.raises(pyepp.ConfigError, match=r"^line 4, column 1: "):
            pyepp.parse_prometheus(text)
        lenient = pyepp.parse_prometheus(text, lenient=True)
        assert lenient.skipped_lines == 3
        assert [line for line, _ in lenient.skipped] == [
            n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "..."
        ]
        # Without the skipped lines the text is valid, and then both parsers agree.
        kept = "".join(line for line in text.splitlines(keepends=True) if line.strip() != "...")
        assert_same_families(lenient, _reference(kept))
        return
    theirs = _reference(text)
    ours = pyepp.parse_prometheus(text)
    assert ours.skipped_lines == 0
    assert len(ours) > 0
    assert_same_families(ours, theirs)


def test_shared_fixture_set_is_complete() -> None:
    folder = shared_fixtures_dir() / "metrics"
    if not folder.is_dir():
        pytest.skip(f"shared fixtures not found at {folder} (set EPP_SHARED_FIXTURES)")
    assert (folder / ELIDED_FIXTURE).is_file()
    assert len([p for p in folder.iterdir() if p.suffix == ".prom"]) >= 2
