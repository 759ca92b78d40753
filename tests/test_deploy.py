"""What can be checked of deploy/ without a Docker engine: the cluster DDL as rendered, the
Compose and Kubernetes manifests, the ClickHouse and Keeper configs, the Dockerfile. The same
stacks are started for real by tests/server when a Docker engine is reachable."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tally.config import Settings
from tally.storage.migrate import (
    LOCAL_SUFFIX,
    RETENTION_COLUMNS,
    SHARDING_KEYS,
    load_migrations,
    migrations_table,
)

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SETTINGS_ENV = {"TALLY_" + name.upper() for name in Settings.__struct_fields__}
CLUSTER = "tally_cluster"


def compose(name: str) -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / name / "compose.yaml").read_text())


def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    docs: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


# --- the cluster schema ----------------------------------------------------------------------


def cluster_ddl(database: str = "tally", backfills: bool = True) -> list[str]:
    statements = [migrations_table(database, CLUSTER)]
    for migration in load_migrations():
        statements += migration.statements(database, CLUSTER)
    return [s.strip() for s in statements if backfills or not s.startswith("INSERT INTO ")]


def parse(statement: str) -> dict[str, str]:
    """Name, kind and the parts of a CREATE (or ALTER) statement that matter here."""
    head = re.match(
        r"(?:CREATE (TABLE|MATERIALIZED VIEW) IF NOT EXISTS|(ALTER) TABLE) (\w+)\.(\w+) "
        r"ON CLUSTER (\w+)",
        statement,
    )
    assert head, statement
    out = {"kind": head[1] or head[2], "database": head[3], "name": head[4], "cluster": head[5]}
    if engine := re.search(r"^ENGINE = (\w+)\((.*)\)$", statement, re.M):
        out["engine"], out["args"] = engine[1], engine[2]
    if view := re.search(r" TO (\w+)\.(\w+) AS\n", statement):
        out["to"] = view[2]
        out["from"] = ",".join(re.findall(r"\bFROM (?:\w+)\.(\w+)", statement))
    if source := re.search(r" AS (\w+)\.(\w+)\nENGINE", statement):
        out["as"] = source[2]
    return out


def test_every_statement_runs_on_the_cluster():
    """Every DDL statement runs ON CLUSTER; a one-time backfill (INSERT ... SELECT) runs from one
    node through the Distributed tables, which send each row to its project's shard."""
    statements = cluster_ddl()
    backfills = [s for s in statements if s.startswith("INSERT INTO ")]
    assert backfills  # schema 007
    for backfill in backfills:
        target = re.match(r"INSERT INTO tally\.(\w+) ", backfill)
        assert target and target[1] in SHARDING_KEYS and "_local" not in backfill
    parsed = [parse(s) for s in statements if s not in backfills]
    assert {p["cluster"] for p in parsed} == {CLUSTER}
    assert {p["database"] for p in parsed} == {"tally"}


def test_storage_tables_are_replicated_locals_behind_distributed_tables():
    tables = {
        p["name"]: p for p in map(parse, cluster_ddl(backfills=False)) if p["kind"] == "TABLE"
    }
    assert set(SHARDING_KEYS) | {"schema_migrations"} | {
        t + LOCAL_SUFFIX for t in SHARDING_KEYS
    } == set(tables)
    for name, key in SHARDING_KEYS.items():
        local, public = tables[name + LOCAL_SUFFIX], tables[name]
        assert local["engine"].startswith("Replicated") and local["engine"].endswith("MergeTree")
        path, replica, *rest = [a.strip() for a in local["args"].split(",", 2)]
        assert path == f"'/clickhouse/tables/{{shard}}/{{database}}/{name}_local'"
        assert replica == "'{replica}'"
        # The engine's own arguments (a version column) follow the replication ones.
        assert rest == (["version"] if name in ("projects", "api_keys") else rest)
        assert public["engine"] == "Distributed"
        assert public["as"] == name + LOCAL_SUFFIX
        assert public["args"] == f"{CLUSTER}, tally, {name}_local, {key}"


def test_alters_change_the_local_tables():
    """A projection or a MergeTree setting belongs where the rows are stored; a new column goes
    to the local tables first, then to the Distributed table that passes it on."""
    statements = cluster_ddl(backfills=False)
    alters = [(s, p) for s, p in zip(statements, map(parse, statements), strict=True)]
    alters = [(s, p) for s, p in alters if p["kind"] == "ALTER"]
    views = [(s, p) for s, p in alters if " MODIFY QUERY\n" in s]
    assert views  # schema 007: each view's query changed on every node, reading local tables
    for sql, _ in views:
        assert set(re.findall(r"\bFROM tally\.(\w+)", sql)) == {"events_local"}
    alters = [(s, p) for s, p in alters if (s, p) not in views]
    assert alters  # schema 004, 005
    assert all(p["name"].removesuffix(LOCAL_SUFFIX) in SHARDING_KEYS for _, p in alters)
    # Columns added (schema 005) or commented (016): the local tables, then the Distributed one.
    columns = [(s, p) for s, p in alters if " ADD COLUMN " in s or " COMMENT COLUMN " in s]
    assert columns  # schema 005
    assert all(p["name"].endswith(LOCAL_SUFFIX) for s, p in alters if (s, p) not in columns)
    for (local_sql, local), (public_sql, public) in zip(columns[::2], columns[1::2], strict=True):
        assert local["name"] == public["name"] + LOCAL_SUFFIX
        verb = " ADD COLUMN " if " ADD COLUMN " in local_sql else " COMMENT COLUMN "
        # A sorting key changed with the column (007) is the local tables' alone.
        change = local_sql.split(verb)[1].split(", MODIFY ORDER BY ")[0]
        assert change == public_sql.split(verb)[1]
        assert ", MODIFY ORDER BY " not in public_sql


def test_engines_match_the_one_node_schema():
    plain = {}
    for migration in load_migrations():
        for statement in migration.statements("tally"):
            if m := re.search(
                r"CREATE TABLE IF NOT EXISTS tally\.(\w+).*?^ENGINE = (\w+)", statement, re.S | re.M
            ):
                plain[m[1]] = m[2]
    tables = {
        p["name"]: p for p in map(parse, cluster_ddl(backfills=False)) if p["kind"] == "TABLE"
    }
    for name, engine in plain.items():
        assert tables[name + LOCAL_SUFFIX]["engine"] == "Replicated" + engine


def test_sharding_keeps_a_tenant_on_one_shard():
    # Rollups are written on the shard of their events: reads find them by the same key.
    events_key = SHARDING_KEYS["events"]
    assert events_key == "cityHash64(project_id)"
    for rollup in RETENTION_COLUMNS:
        assert SHARDING_KEYS[rollup] == events_key
    assert SHARDING_KEYS["api_keys"] == SHARDING_KEYS["api_key_usage"] == events_key
    assert SHARDING_KEYS["projects"] == "cityHash64(id)"  # the project id


def test_views_read_and_write_local_tables():
    views = [
        p for p in map(parse, cluster_ddl(backfills=False)) if p["kind"] == "MATERIALIZED VIEW"
    ]
    assert {v["to"] for v in views} == {
        r + LOCAL_SUFFIX for r in RETENTION_COLUMNS if r != "events"
    }
    assert all(v["from"] == "events_local" for v in views)


def test_schema_migrations_is_one_table_replicated_on_every_node():
    ddl = migrations_table("tally", CLUSTER)
    assert "ON CLUSTER tally_cluster" in ddl
    engine = parse(ddl.strip())
    assert engine["engine"] == "ReplicatedReplacingMergeTree"
    assert engine["args"] == (
        "'/clickhouse/tables/{database}/schema_migrations', '{shard}-{replica}', applied_at"
    )


def test_deduplication_window_is_the_replicated_one():
    for statement in cluster_ddl():
        assert "non_replicated_deduplication_window" not in statement
    plain = [s for m in load_migrations() for s in m.statements("tally")]
    windows = sum("non_replicated_deduplication_window = 1000" in s for s in plain)
    assert windows == len(RETENTION_COLUMNS)  # events and every rollup
    assert sum("replicated_deduplication_window = 1000" in s for s in cluster_ddl()) == windows


# --- Compose ---------------------------------------------------------------------------------


def env_names(service: dict[str, Any]) -> set[str]:
    env = service.get("environment", {})
    return set(env) if isinstance(env, dict) else {e.split("=", 1)[0] for e in env}


@pytest.mark.parametrize("stack", ["compose", "cluster"])
def test_compose_stack(stack):
    services = compose(stack)["services"]
    tally, migrate = services["tally"], services["tally-migrate"]
    clickhouse = [s for s in services.values() if "clickhouse-server" in s.get("image", "")]
    assert clickhouse and all(s["image"] == clickhouse[0]["image"] for s in clickhouse)
    image = clickhouse[0]["image"]
    assert re.fullmatch(r"clickhouse/clickhouse-server:\d+\.\d+(\.\d+)*", image), image
    for node in clickhouse:
        assert {"CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD"} <= env_names(node)
        assert node["environment"]["CLICKHOUSE_USER"] != "default"
        assert any(v.endswith(":/var/lib/clickhouse") for v in node["volumes"])
        assert "SELECT 1" in " ".join(node["healthcheck"]["test"])
        assert node["restart"] == "unless-stopped"
        assert node["deploy"]["resources"]["limits"]["memory"]
    # migrate first, once, then serve behind it
    assert migrate["command"] == ["migrate"] and migrate["restart"] == "no"
    assert tally["depends_on"]["tally-migrate"] == {"condition": "service_completed_successfully"}
    for service in (tally, migrate):
        assert all(
            dep == "tally-migrate" or cond == {"condition": "service_healthy"}
            for dep, cond in (service.get("depends_on") or {}).items()
        )
    assert migrate.get("depends_on") or stack == "cluster"
    command = tally["command"]
    assert command[:1] == ["serve"] and "--workers" in command and "--no-migrate" in command
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert "/api/health" in " ".join(tally["healthcheck"]["test"])
    assert tally["restart"] == "unless-stopped"
    assert "tally-log:/var/lib/tally" in tally["volumes"]  # the ingest log outlives the container
    assert tally["deploy"]["resources"]["limits"]["cpus"]
    grace = int(tally["stop_grace_period"].rstrip("s"))
    assert grace > int(tally["environment"]["TALLY_SHUTDOWN_TIMEOUT_SECONDS"])
    for service in (tally, migrate):
        names = {n for n in env_names(service) if n.startswith("TALLY_")}
        assert names <= SETTINGS_ENV, names - SETTINGS_ENV
        assert {"TALLY_CLICKHOUSE_URL", "TALLY_JWT_SECRET"} <= names
        url = service["environment"]["TALLY_CLICKHOUSE_URL"]
        assert url.startswith("http://") and "@" in url
    if stack == "cluster":
        assert tally["environment"]["TALLY_CLICKHOUSE_CLUSTER"] == CLUSTER
        assert set(tally["depends_on"]) >= {"ch-s1-r1", "ch-s1-r2", "ch-s2-r1", "ch-s2-r2"}


def test_compose_secrets_are_required_not_defaulted():
    for stack in ("compose", "cluster"):
        text = (DEPLOY / stack / "compose.yaml").read_text()
        assert "${CLICKHOUSE_PASSWORD:?" in text and "${TALLY_JWT_SECRET:?" in text
        example = (DEPLOY / stack / ".env.example").read_text()
        assert re.search(r"^CLICKHOUSE_PASSWORD=$", example, re.M)


# --- the cluster's ClickHouse and Keeper configs ----------------------------------------------


def xml(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def test_remote_servers_is_two_shards_of_two_replicas():
    services = compose("cluster")["services"]
    root = xml(DEPLOY / "cluster" / "clickhouse" / "cluster.xml")
    shards = root.findall(f"remote_servers/{CLUSTER}/shard")
    assert len(shards) == 2
    hosts = []
    for shard in shards:
        assert shard.findtext("internal_replication") == "true"
        replicas = shard.findall("replica")
        assert len(replicas) == 2
        hosts += [r.findtext("host") for r in replicas]
    assert len(set(hosts)) == 4 and set(hosts) <= set(services)
    assert (
        root.find(f"remote_servers/{CLUSTER}/secret").get("from_env") == "CLICKHOUSE_CLUSTER_SECRET"
    )
    keepers = [n.findtext("host") for n in root.findall("zookeeper/node")]
    assert len(keepers) == 3 and set(keepers) <= set(services)
    assert root.findtext("distributed_ddl/path")
    # Each node's macros say which shard it serves, matching remote_servers.
    for number, shard in enumerate(shards, start=1):
        for replica in shard.findall("replica"):
            host = replica.findtext("host")
            macros = xml(DEPLOY / "cluster" / "clickhouse" / f"macros-{host}.xml").find("macros")
            assert int(macros.findtext("shard")) == number
            assert macros.findtext("replica") == host
            mounts = services[host]["volumes"]
            assert (
                f"./clickhouse/macros-{host}.xml:/etc/clickhouse-server/config.d/macros.xml:ro"
                in mounts
            )
            assert (
                "./clickhouse/cluster.xml:/etc/clickhouse-server/config.d/cluster.xml:ro" in mounts
            )


def test_macros_are_unique_per_node():
    pairs = []
    for path in sorted((DEPLOY / "cluster" / "clickhouse").glob("macros-*.xml")):
        macros = xml(path).find("macros")
        pairs.append((macros.findtext("shard"), macros.findtext("replica")))
    assert len(pairs) == 4 and len(set(pairs)) == 4
    assert len({replica for _, replica in pairs}) == 4  # unique across the cluster too


def test_keeper_is_a_three_node_raft_ensemble():
    services = compose("cluster")["services"]
    ids = []
    for number in (1, 2, 3):
        server = xml(DEPLOY / "cluster" / "keeper" / f"keeper-{number}.xml").find("keeper_server")
        ids.append(server.findtext("server_id"))
        raft = server.findall("raft_configuration/server")
        assert [(s.findtext("id"), s.findtext("hostname")) for s in raft] == [
            ("1", "keeper-1"),
            ("2", "keeper-2"),
            ("3", "keeper-3"),
        ]
        assert (
            f"./keeper/keeper-{number}.xml:/etc/clickhouse-keeper/keeper_config.xml:ro"
            in (services[f"keeper-{number}"]["volumes"])
        )
        assert "ruok" in " ".join(services[f"keeper-{number}"]["healthcheck"]["test"])
    assert ids == ["1", "2", "3"]


# --- Dockerfile --------------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_non_root_and_serves():
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)", text, re.M)
    assert stages == ["build", "runtime"]
    assert "pip wheel" in text
    runtime = text.split("AS runtime", 1)[1]
    user = re.findall(r"^USER (\S+)", runtime, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["tally"\]$', runtime, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", runtime, re.M)
    assert cmd and yaml.safe_load(cmd[1])[:3] == ["serve", "--host", "0.0.0.0"]
    assert "/api/health" in runtime.split("HEALTHCHECK", 1)[1]
    ignored = (DEPLOY.parent / ".dockerignore").read_text()
    assert "!service/" in ignored and "!schema/" in ignored


# --- Kubernetes --------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    files = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_deployment():
    docs = k8s()
    deployment = docs[("StatefulSet", "tally")]
    pod = deployment["spec"]["template"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    (container,) = pod["spec"]["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/api/health"
    # Liveness does not ask ClickHouse: an outage must not restart every pod.
    assert container["livenessProbe"]["httpGet"]["path"] == "/api/health/live"
    # A ClickHouse outage must not take pods out of the Service: the log takes the events.
    assert container["readinessProbe"]["tcpSocket"]["port"] == "http"
    # The ingest log sits on a persistent volume, mounted where TALLY_DATA_DIR points.
    (claim,) = deployment["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/tally"
    assert claim["metadata"]["name"] not in {v["name"] for v in pod["spec"]["volumes"]}
    config = docs[("ConfigMap", "tally")]["data"]
    workers = int(container["args"][container["args"].index("--workers") + 1])
    volume_mb = int(claim["spec"]["resources"]["requests"]["storage"].removesuffix("Gi")) * 1024
    assert workers * float(config["TALLY_LOG_CAP_MB"]) < volume_mb  # the cap is hit first
    headless = docs[("Service", deployment["spec"]["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    assert container["args"][0] == "serve" and "--no-migrate" in container["args"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["resources"]["limits"] and container["resources"]["requests"]
    # Long enough to flush: preStop sleep, then the worker's drain.
    config = docs[("ConfigMap", "tally")]["data"]
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = int(config["TALLY_SHUTDOWN_TIMEOUT_SECONDS"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > pre_stop + drain
    refs = {(k, v["name"]) for e in container["envFrom"] for k, v in e.items()}
    assert refs == {("secretRef", "tally"), ("configMapRef", "tally")}


def test_configuration_names_are_settings():
    docs = k8s()
    secret = docs[("Secret", "tally")]["stringData"]
    config = docs[("ConfigMap", "tally")]["data"]
    assert set(secret) | set(config) <= SETTINGS_ENV, (set(secret) | set(config)) - SETTINGS_ENV
    assert {"TALLY_CLICKHOUSE_URL", "TALLY_JWT_SECRET"} <= set(secret)
    assert not set(secret) & set(config)
    assert all("CHANGE-ME" in value for value in secret.values())  # an example, no secrets
    url = secret["TALLY_CLICKHOUSE_URL"]
    host = re.match(r"https?://[^@]+@([^:/]+)", url)[1]
    external = docs[("Service", host)]
    assert external["spec"]["type"] == "ExternalName"


def test_scaling_and_disruption():
    docs = k8s()
    labels = docs[("StatefulSet", "tally")]["spec"]["template"]["metadata"]["labels"]
    hpa = docs[("HorizontalPodAutoscaler", "tally")]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "tally",
    }
    assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    pdb = docs[("PodDisruptionBudget", "tally")]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = docs[("Service", "tally")]
    assert service["spec"]["selector"].items() <= labels.items()


def test_migrate_job():
    job = k8s()[("Job", "tally-migrate")]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["migrate"]
    deployment = k8s()[("StatefulSet", "tally")]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == deployment["image"]
    assert container["envFrom"] == deployment["envFrom"]
