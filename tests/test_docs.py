"""The SQL that docs/operations.md offers analysts runs as written on the real engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
BLOCKS = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
QUERIES = [b for b in BLOCKS if b.lstrip().upper().startswith("SELECT")]


def test_the_doc_has_examples():
    assert len(QUERIES) >= 5


@pytest.mark.parametrize("sql", QUERIES, ids=[f"example {i}" for i in range(len(QUERIES))])
def test_documented_query_runs(client, sql):
    storage = client.app.state.storage
    storage.query(sql.replace("tally.", f"{storage.database}."))
