"""The Python package against the command line: same verdicts, clear errors."""

import json
import subprocess
import threading

import pytest

import failover
from conftest import ROOT, corpus_lines, run_cli

OUT = ("reason", "rule", "decided_by", "failover", "probability", "status")
IN = ("message", "provider", "model", "status", "code", "type", "body")


def columns(lines):
    """Input lines (dicts) as classify_many's columns."""
    return {k: [l.get(k) for l in lines] for k in IN}


@pytest.fixture(scope="module")
def engine():
    return failover.Engine()


def test_the_readme_example(engine):
    v = engine.classify(message="Rate limit reached", status=429)
    assert v.reason == "rate_limit"
    assert v.decided_by == "rule"
    assert v.failover is True
    assert v.status == 429
    assert v.rule and v.rule.startswith("rate_limit.")


def test_a_verdict_is_the_command_lines_line(engine, cli):
    cases = [
        dict(message="Key limit exceeded", status=403, provider="openrouter"),
        dict(message="HTTP 402: Your weekly usage limit resets tomorrow"),
        dict(body='{"error": {"message": "Overloaded", "type": "overloaded_error"}}', status=529),
        dict(message="something went sideways", status=500),
        dict(message="nothing here says anything"),
    ]
    for case in cases:
        args = []
        for k, v in case.items():
            args += [f"--{k}", str(v)]
        line = subprocess.run(
            [str(cli), "classify", *args], check=True, capture_output=True, text=True
        ).stdout.strip()
        v = engine.classify(**case)
        assert v.json == line, case
        parsed = json.loads(line)
        assert {k: getattr(v, k) for k in parsed} == parsed, case


def test_the_model_decides_only_when_asked(engine, field_files):
    # Where no text rule decides, the embedded model may (at the costs'
    # thresholds, as the CLI): never with model=None, and only at or above
    # one threshold given as min_confidence.
    cols = columns(corpus_lines(field_files))
    by_model = engine.classify_many(**cols)
    rows = [i for i, d in enumerate(by_model["decided_by"]) if d == "model"]
    assert len(rows) >= 10, rows
    assert all(by_model["rule"][i] is None and 0 < by_model["probability"][i] <= 1 for i in rows)
    rules_only = failover.Engine(model=None).classify_many(**cols)
    assert {rules_only["decided_by"][i] for i in rows} <= {"weak rule", "status rule", "none"}
    assert set(rules_only["probability"]) == {None}
    certain = failover.Engine(min_confidence=1.0).classify_many(**cols)
    below_one = [i for i in rows if by_model["probability"][i] < 1]
    assert below_one
    assert [certain["rule"][i] for i in below_one] == [rules_only["rule"][i] for i in below_one]
    anything = failover.Engine(min_confidence=0.0).classify_many(**cols)
    assert anything["decided_by"].count("model") >= len(rows)


def test_a_body_may_be_text_or_parsed_json(engine):
    body = {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    as_dict = engine.classify(body=body, status=429, provider="openai")
    as_text = engine.classify(body=json.dumps(body), status=429, provider="openai")
    assert as_dict.reason == as_text.reason == "billing"
    assert as_dict == as_text


def test_operator_rules_come_first(tmp_path):
    (tmp_path / "mine.rules").write_text(
        'rule billing.mine when message has "rate limit" => billing\n', encoding="utf-8"
    )
    from_dir = failover.Engine(rules=[tmp_path]).classify(message="Rate limit reached", status=429)
    assert (from_dir.reason, from_dir.rule) == ("billing", "billing.mine")
    in_memory = failover.Engine(
        sources=[("mine.rules", 'rule billing.mine when message has "rate limit" => billing')]
    ).classify(message="Rate limit reached", status=429)
    assert in_memory == from_dir
    assert "billing" in failover.Engine(rules=[str(tmp_path)]).reasons


def test_rules_with_errors_raise_rules_error_with_diagnostics():
    with pytest.raises(failover.RulesError) as e:
        failover.Engine(sources=[("bad.rules", 'rule x when message has "a" => rate_limt\n')])
    assert "bad.rules:1:" in str(e.value)
    assert "did you mean `rate_limit`" in str(e.value)
    [d] = e.value.diagnostics
    assert (d["code"], d["severity"], d["file"], d["line"]) == ("E002", "error", "bad.rules", 1)


def test_a_missing_rules_directory_is_a_rules_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(failover.RulesError, match="nope") as e:
        failover.Engine(rules=[missing])
    assert e.value.diagnostics == []
    with pytest.raises(failover.RulesError, match="holds no `.rules` files"):
        failover.Engine(rules=[tmp_path])


def test_a_bad_model_file_is_a_model_error(tmp_path):
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a model")
    with pytest.raises(failover.ModelError):
        failover.Engine(model=junk)
    with pytest.raises(TypeError, match="model"):
        failover.Engine(model=3)
    with pytest.raises(ValueError, match="min_confidence"):
        failover.Engine(min_confidence=1.5)


@pytest.mark.parametrize("status", [700, 99, -1, 429.5, "abc", True])
def test_a_status_that_is_not_one_is_a_value_error(engine, status):
    with pytest.raises(ValueError, match="`status` must be an HTTP status code"):
        engine.classify(message="x", status=status)


def test_a_status_may_be_a_string_of_digits_or_a_whole_float(engine):
    assert engine.classify(message="x", status="429").status == 429
    assert engine.classify(message="x", status=429.0).status == 429


@pytest.mark.parametrize("field", ["message", "provider", "code", "type", "model"])
def test_a_text_field_that_is_not_text_is_a_type_error(engine, field):
    with pytest.raises(TypeError, match=f"`{field}` must be a str or None, not int"):
        engine.classify(**{field: 42})
    with pytest.raises(TypeError, match="`body` must be a str, a dict, a list or None"):
        engine.classify(body=3.5j)


def test_explain_names_the_atoms_and_the_rule(engine, cli):
    ex = engine.explain(message="Rate limit reached", status=429)
    assert ex.verdict == engine.classify(message="Rate limit reached", status=429)
    assert "rate limit" in ex.atoms
    assert ex.verdict.rule in ex.text
    printed = subprocess.run(
        [str(cli), "classify", "--explain", "--message", "Rate limit reached", "--status", "429"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert printed.startswith(ex.text)
    assert str(ex) == ex.text


def test_classify_many_is_classify_row_by_row(engine):
    messages = ["Rate limit reached", None, "Insufficient credits", "overloaded", "x"]
    statuses = [429, 500, None, 529, "402"]
    many = engine.classify_many(messages, status=statuses, provider="openai")
    assert set(many) == set(OUT) | {"truncated"}
    for i, (m, s) in enumerate(zip(messages, statuses)):
        one = engine.classify(m, status=s, provider="openai").to_dict()
        assert {k: many[k][i] for k in one} == one, i


def test_classify_many_takes_data_frame_columns(engine):
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    df = pd.DataFrame(
        {
            "message": ["Rate limit reached", None, "Insufficient credits", "Bad gateway"],
            "status": [429, None, 402, 502],  # float64 with NaN, as pandas keeps it
        }
    )
    assert df["status"].dtype == "float64"
    from_lists = engine.classify_many(
        ["Rate limit reached", None, "Insufficient credits", "Bad gateway"],
        status=[429, None, 402, 502],
    )
    assert engine.classify_many(df["message"], status=df["status"]) == from_lists
    table = pa.Table.from_pandas(df)
    assert engine.classify_many(table["message"], status=table["status"]) == from_lists
    assert (
        engine.classify_many(pa.array(df["message"]), status=pa.array(df["status"])) == from_lists
    )
    as_string_dtype = df["message"].astype("string")  # missing values are pandas.NA
    assert engine.classify_many(as_string_dtype, status=df["status"]) == from_lists
    assert list(pd.DataFrame(from_lists)["reason"]) == from_lists["reason"]


def test_classify_many_reports_the_bad_row(engine):
    with pytest.raises(ValueError, match="row 2: `status` must be an HTTP status code"):
        engine.classify_many(["a", "b", "c"], status=[429, 500, 1000])
    with pytest.raises(TypeError, match="row 1: `message` must be a str or None, not int"):
        engine.classify_many(["a", 7])
    with pytest.raises(ValueError, match="`message` has 2 rows, `status` has 3"):
        engine.classify_many(["a", "b"], status=[1, 2, 3])
    with pytest.raises(TypeError, match="must be a column"):
        engine.classify_many(object())
    with pytest.raises(TypeError, match="`message` must be a str or None, not bytes"):
        engine.classify_many(b"Rate limit reached")
    with pytest.raises(ValueError, match="row 1: `message` is not valid text"):
        engine.classify_many(["a", "\ud800 rate limit"])


def test_classify_many_on_threads_gives_the_same_verdicts(engine, field_files):
    lines = corpus_lines(field_files) * 5
    cols = {k: [l.get(k) for l in lines] for k in ("message", "provider", "status", "code", "type", "body")}
    one = engine.classify_many(**cols, threads=1)
    four = engine.classify_many(**cols, threads=4)
    assert one == four
    assert len(one["reason"]) == len(lines) >= 5000
    # Two Python threads at once (the GIL released inside): the same again.
    results = [None, None]

    def run(i):
        results[i] = engine.classify_many(**cols)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results[0] == results[1] == one


def test_the_field_corpus_equals_the_command_line_line_by_line(engine, cli, field_files, tmp_path):
    lines = corpus_lines(field_files)
    expected = run_cli(cli, lines, tmp_path)
    assert len(expected) == len(lines) >= 1000
    cols = {k: [l.get(k) for l in lines] for k in ("message", "provider", "model", "status", "code", "type", "body")}
    got = engine.classify_many(**cols)
    for i, want in enumerate(expected):
        row = {k: got[k][i] for k in want}
        assert row == want, (i, lines[i])


def test_the_original_vectors_equal_the_command_line(engine, cli, tmp_path):
    lines = corpus_lines([ROOT / "tests" / "vectors" / "openclaw.yaml"])
    expected = run_cli(cli, lines, tmp_path)
    got = engine.classify_many(**{k: [l.get(k) for l in lines] for k in ("message", "provider", "status", "code", "type", "body")})
    assert got["reason"] == [e["reason"] for e in expected]
    assert got["rule"] == [e["rule"] for e in expected]


def test_read_corpus_reads_every_item():
    items = failover.read_corpus(ROOT / "tests" / "vectors" / "openclaw.yaml")
    text = (ROOT / "tests" / "vectors" / "openclaw.yaml").read_text(encoding="utf-8")
    assert len(items) == text.count("\n  expected:") >= 500
    assert all(isinstance(i["expected"], list) and i["expected"] for i in items)
    with pytest.raises(OSError):
        failover.read_corpus(ROOT / "no-such-file.yaml")
