"""Cluster mode on the embedded engine: the contract tests pass against the cluster schema.

The schema is rendered for a cluster (local tables, Distributed tables by the public names, views
on the local tables, the cluster session settings on every call) and the service runs on it; see
tests/storage_modes.py for what the embedded engine leaves out (ON CLUSTER, replication).
"""

from __future__ import annotations

import pytest

from storage_modes import CLUSTER, CLUSTER_SHAPE_CONFIG, SERVER_URL, run_contract_tests


@pytest.mark.slow
@pytest.mark.timeout(960)  # the contract tests' own subprocess timeout (900 s), and a minute
@pytest.mark.skipif(bool(CLUSTER or SERVER_URL), reason="already a run on other storage")
def test_contract_tests_pass_in_cluster_mode(tmp_path):
    cluster = "tally_shape"
    # chDB reads config.xml from its working directory: the cluster of one local node.
    (tmp_path / "config.xml").write_text(CLUSTER_SHAPE_CONFIG.format(cluster=cluster))
    code, output = run_contract_tests(
        tmp_path, {"TALLY_TEST_CLICKHOUSE_CLUSTER": cluster}, timeout=900
    )
    assert code == 0, output[-20000:]  # the failure, its servers' logs, the summary
    assert " passed" in output, output[-2000:]
