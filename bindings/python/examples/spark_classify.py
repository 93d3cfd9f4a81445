"""Classify an error log with PySpark: a pandas UDF over `failover`.

    spark-submit spark_classify.py errors.jsonl verdicts/    # local or on a cluster

Reads JSON lines in `failover classify`'s input format (`message`,
`status`, `provider`, `code`, `type`, `body`; other fields ignored),
adds a `verdict` struct column (reason, rule, decided_by, failover,
probability) and writes Parquet. Each Python worker builds its engine once
(the embedded rules and model, or `FAILOVER_RULES=dir1:dir2` over them)
and classifies whole Arrow batches with `Engine.classify_many`, which
releases the GIL. docs/spark.md shows how to run it on a cluster.
"""

import os
import sys

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

VERDICT = T.StructType(
    [
        T.StructField("reason", T.StringType()),
        T.StructField("rule", T.StringType()),
        T.StructField("decided_by", T.StringType()),
        T.StructField("failover", T.BooleanType()),
        T.StructField("probability", T.DoubleType()),
    ]
)

# The input columns, in `failover classify`'s names; absent ones are null.
INPUT = {
    "message": T.StringType(),
    "status": T.IntegerType(),
    "provider": T.StringType(),
    "code": T.StringType(),
    "type": T.StringType(),
    "body": T.StringType(),
}

_engines = {}


def engine():
    """This worker's engine, built on first use (about 50 ms)."""
    import failover

    rules = tuple(filter(None, os.environ.get("FAILOVER_RULES", "").split(":")))
    if rules not in _engines:
        _engines[rules] = failover.Engine(rules=list(rules))
    return _engines[rules]


@F.pandas_udf(VERDICT)
def classify(
    message: pd.Series,
    status: pd.Series,
    provider: pd.Series,
    code: pd.Series,
    type_: pd.Series,
    body: pd.Series,
) -> pd.DataFrame:
    v = engine().classify_many(
        message, status=status, provider=provider, code=code, type=type_, body=body
    )
    return pd.DataFrame({f.name: v[f.name] for f in VERDICT.fields})


def with_verdicts(errors: DataFrame) -> DataFrame:
    """`errors` with a `verdict` column; missing input columns count as null."""
    cols = [
        F.col(c).cast(t) if c in errors.columns else F.lit(None).cast(t)
        for c, t in INPUT.items()
    ]
    return errors.withColumn("verdict", classify(*cols))


def main(source: str, dest: str) -> None:
    spark = SparkSession.builder.appName("failover-classify").getOrCreate()
    # `body` may be a JSON object in a line: read it as its text.
    schema = T.StructType([T.StructField(c, T.StringType()) for c in INPUT])
    errors = spark.read.schema(schema).json(source)
    with_verdicts(errors).write.mode("overwrite").parquet(dest)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: spark_classify.py ERRORS.jsonl OUT_DIR")
    main(sys.argv[1], sys.argv[2])
