"""Shared fixtures: the repository's root, the `failover` command line
(the reference every verdict here is compared with) and the corpora."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def cli_path() -> pathlib.Path:
    """The `failover` binary: $FAILOVER_BIN, else the workspace's release
    build, else its debug build."""
    if os.environ.get("FAILOVER_BIN"):
        return pathlib.Path(os.environ["FAILOVER_BIN"])
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("release", "debug"):
        p = target / profile / "failover"
        if p.exists():
            return p
    pytest.fail(
        "no `failover` binary: build it (`cargo build --release -p failover-cli`) "
        "or set FAILOVER_BIN"
    )


@pytest.fixture(scope="session")
def cli():
    return cli_path()


def run_cli(cli, lines, tmp_path, *args):
    """`failover classify FILE` on JSONL `lines` (dicts): one parsed verdict
    per line."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines), encoding="utf-8")
    out = subprocess.run(
        [str(cli), "classify", "--quiet", *args, str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [json.loads(l) for l in out.splitlines()]


FIELDS = ("message", "provider", "model", "status", "code", "type", "body")


def corpus_lines(paths):
    """The items of corpus files as `failover classify` input lines."""
    import failover

    lines = []
    for p in paths:
        for item in failover.read_corpus(p):
            lines.append({k: item[k] for k in FIELDS if item[k] is not None})
    return lines


@pytest.fixture(scope="session")
def field_files():
    files = sorted((ROOT / "tests" / "field").glob("*.yaml"))
    assert len(files) >= 5, files
    return files
