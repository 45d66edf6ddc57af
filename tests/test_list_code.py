"""``harness list code``: the source digest that runs of this code record, which ``harness compare --candidate
FOLDER@NAME`` takes to name their records (nothing printed it: a user read it from a record after a run)."""

from __future__ import annotations

import json
import re

from support import run_code_digest
from tiny_domain import REPO, harness

DIGEST = re.compile(r"^(?P<name>.+?)\s+(?P<digest>[0-9a-f]{64})\b")


def _rows(stdout: str) -> dict[str, str]:
    """Each listed row's name -> its digest; every line is one."""
    matches = [DIGEST.match(line) for line in stdout.splitlines()]
    assert all(matches), stdout
    return {m["name"]: m["digest"] for m in matches}


def test_without_plugins_the_one_digest_is_the_packages_run_code():
    listed = harness("list", "code", env={"HARNESS_PLUGINS": ""})
    assert listed.returncode == 0, listed.stderr
    assert _rows(listed.stdout) == {"built-in": run_code_digest(REPO)}


def test_with_plugins_each_row_is_the_digest_such_a_run_records(tmp_path):
    env = {"HARNESS_PLUGINS": "tiny_domain,tiny_loss"}
    listed = harness("list", "code", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = _rows(listed.stdout)
    assert set(rows) == {"built-in", "domain tiny", "loss tiny_weighted_nce", "domain tiny, loss tiny_weighted_nce"}
    assert rows["built-in"] == run_code_digest(REPO) and len(set(rows.values())) == 4
    for loss in ("infonce", "tiny_weighted_nce"):
        done = harness("run", "--domain", "tiny", "--loss", loss, "--seeds", "0", "--tracker", "none", "--quiet",
                       "--results", str(tmp_path), env=env)
        assert done.returncode == 0, done.stderr
    records = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    recorded = {record["loss"]: record["software"]["source_digest"] for record in records}
    assert recorded == {"infonce": rows["domain tiny"],
                        "tiny_weighted_nce": rows["domain tiny, loss tiny_weighted_nce"]}
    # the section is part of the whole listing too
    assert "code:" in harness("list", env=env).stdout
