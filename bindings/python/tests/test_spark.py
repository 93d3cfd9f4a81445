"""The Spark example (examples/spark_classify.py) in local mode: the same
verdicts as `failover classify` on the same lines, and its rows/s beside the
command line's on this machine.

Needs pyspark and a Java runtime; FAILOVER_SKIP_SPARK=1 skips it (printing
SKIPPED), as the repository's other tests skip what they cannot start."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, corpus_lines, run_cli

if os.environ.get("FAILOVER_SKIP_SPARK") == "1":
    print("SKIPPED: the Spark test (FAILOVER_SKIP_SPARK=1)")
    pytest.skip("FAILOVER_SKIP_SPARK=1", allow_module_level=True)

import pyspark  # noqa: E402,F401  (missing: `pip install pyspark`, or FAILOVER_SKIP_SPARK=1)

sys.path.insert(0, str(ROOT / "bindings" / "python" / "examples"))
import spark_classify  # noqa: E402

COLUMNS = ("message", "status", "provider", "code", "type", "body")


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    # The workers run this Python, the one failover is installed in.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    s = (
        SparkSession.builder.master("local[2]")
        .appName("failover-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    # The workers unpickle the UDF by its module: ship the module to them.
    s.sparkContext.addPyFile(spark_classify.__file__)
    yield s
    s.stop()


def lines_of_the_corpora(field_files):
    return corpus_lines(list(field_files) + [ROOT / "tests" / "vectors" / "openclaw.yaml"])


def test_spark_gives_the_command_lines_verdicts(spark, cli, field_files, tmp_path):
    from pyspark.sql import types as T

    lines = [{k: l[k] for k in COLUMNS if k in l} for l in lines_of_the_corpora(field_files)]
    expected = run_cli(cli, lines, tmp_path)
    schema = T.StructType(
        [T.StructField("id", T.LongType())]
        + [T.StructField(c, spark_classify.INPUT[c]) for c in COLUMNS]
    )
    rows = [(i,) + tuple(l.get(c) for c in COLUMNS) for i, l in enumerate(lines)]
    df = spark.createDataFrame(rows, schema).repartition(4)
    got = spark_classify.with_verdicts(df).orderBy("id").collect()
    assert len(got) == len(expected) == len(lines) > 1500
    for row, want in zip(got, expected):
        v = row["verdict"].asDict()
        assert {k: v[k] for k in v if k in want} == {k: want[k] for k in v if k in want}, lines[row["id"]]
        assert v["probability"] == want.get("probability"), lines[row["id"]]


def test_spark_rows_per_second_beside_the_command_line(spark, cli, field_files, tmp_path, capsys):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    n = int(os.environ.get("FAILOVER_SPARK_ROWS", "100000"))
    lines = [{k: l[k] for k in COLUMNS if k in l} for l in lines_of_the_corpora(field_files)]
    path = tmp_path / "errors.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps(lines[i % len(lines)]) + "\n")

    t0 = time.perf_counter()
    subprocess.run([str(cli), "classify", "--quiet", str(path)], check=True, stdout=subprocess.DEVNULL)
    cli_s = time.perf_counter() - t0

    schema = T.StructType([T.StructField(c, T.StringType()) for c in COLUMNS])
    errors = spark.read.schema(schema).json(str(path))
    t0 = time.perf_counter()
    agg = (
        spark_classify.with_verdicts(errors)
        .agg(F.count("*").alias("rows"), F.sum(F.length("verdict.reason")).alias("chars"))
        .collect()[0]
    )
    spark_s = time.perf_counter() - t0
    assert agg["rows"] == n and agg["chars"] > n
    with capsys.disabled():  # shown without `-s`, as the CI log's measurement
        print(
            f"\n{n} rows: Spark local[2] (pandas UDF, failover.Engine.classify_many) "
            f"{n / spark_s:,.0f} rows/s ({spark_s:.2f} s); "
            f"`failover classify` {n / cli_s:,.0f} rows/s ({cli_s:.2f} s, whole process); "
            f"CLI binary {cli}"
        )
