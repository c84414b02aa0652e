"""`sluice serve --auth --workers 2` for real, and `sluice auth` on the places keys live.

The workers share the --data-dir's auth files: a key or binding made through one worker holds
on the other as soon as it is acknowledged, and `sluice auth create-key --data-dir` works on
the directory whether the workers run or not. A cluster keeps its keys in etcd, where
`sluice auth create-key --cluster` writes them directly. Requests are steered to each worker
by opening connections until one lands there (`/readyz` names the worker that answered).
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth.acl import AclBinding
from gateway.auth.credentials import key_digest, new_api_key
from gateway.auth.shared_store import SharedFileAuthStore
from gateway.worker_dirs import INTERNAL_KEY, ROOT
from gateway.workers.local_cluster import LocalCluster, free_port
from tests.auth.jwks import AUDIENCE, ISSUER, Signer
from tests.auth.support import bearer, binding
from tests.auth.test_cluster import INTERNAL_KEY as CLUSTER_INTERNAL_KEY
from tests.auth.test_cluster import call, cluster  # noqa: F401 (the fixture: etcd, two nodes)
from tests.e2e.conftest import until
from tests.e2e.test_workers import Supervisor, start_supervisor
from tests.tls import write_client_ca, write_self_signed

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("etcd", "curl")),
    reason="needs etcd (etcd-server) and curl",
)

SLUICE = str(Path(sys.executable).parent / "sluice")


def sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=60)


def create_key(*args: str) -> str:
    """`sluice auth create-key ARGS`: the secret it printed."""
    done = sluice("auth", "create-key", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class Workers:
    """The running workers, the administrator's key, and what the clients present."""

    supervisor: Supervisor
    admin: str
    trust: ssl.SSLContext  # the server's certificate
    with_certificate: ssl.SSLContext  # the same, and carol's client certificate
    signer: Signer

    @property
    def url(self) -> str:
        return self.supervisor.url

    def on(self, worker: int, key: str | None = None, *, certificate: bool = False) -> httpx.Client:
        """A client whose kept-alive connection landed on `worker` (found as the admin, or by
        the client certificate); it sends no credentials of its own."""
        verify = self.with_certificate if certificate else self.trust
        probe = {} if certificate else bearer(key or self.admin)
        for _ in range(200):
            client = httpx.Client(base_url=self.url, timeout=30, verify=verify)
            ready = client.get("/readyz", headers=probe)
            assert ready.status_code == 200, ready.text
            if ready.json()["worker"] == worker:
                return client
            client.close()
        raise AssertionError(f"200 connections and none on worker {worker}")


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    base = tmp_path_factory.mktemp("auth-workers")
    data = base / "data"
    # The administrator's key, made offline before the workers ever ran.
    admin = create_key("--data-dir", str(data), "--principal", "admin")
    cert, key = write_self_signed(base)
    ca, client, client_key = write_client_ca(base, "carol")
    signer = Signer()
    jwks = signer.write_jwks(base / "jwks.json")
    supervisor = start_supervisor(
        data, "--auth", "--super-user", "admin", "--auth-basic",
        "--tls-cert", str(cert), "--tls-key", str(key), "--tls-client-ca", str(ca),
        "--jwt-jwks", str(jwks), "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE,
    )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(cert))
    with_certificate = ssl.create_default_context(cafile=str(cert))
    with_certificate.load_cert_chain(str(client), str(client_key))
    yield Workers(supervisor, admin, trust, with_certificate, signer)
    if supervisor.process.poll() is None:
        assert supervisor.stop() == 0


@pytest.fixture
def pair(workers: Workers) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """A connection on worker 0 and one on worker 1."""
    zero, one = workers.on(0), workers.on(1)
    yield zero, one
    zero.close()
    one.close()


def problem(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    doc: dict[str, Any] = answer.json()
    assert doc["code"] == code, doc
    return doc


def test_every_worker_asks_for_credentials_and_keeps_internal_routes_to_the_workers(
    workers: Workers, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    internal_key_file = workers.supervisor.data_dir / ROOT / INTERNAL_KEY
    assert internal_key_file.stat().st_mode & 0o777 == 0o600
    internal = internal_key_file.read_text().strip()
    for client in pair:
        refused = client.get("/v1/topics")
        problem(refused, 401, "UNAUTHENTICATED")
        assert refused.headers["WWW-Authenticate"].startswith('Bearer realm="sluice"')
        assert "Basic" in refused.headers["WWW-Authenticate"]
        problem(
            client.get("/v1/topics", headers=bearer("sluice_0_unknown")), 401, "UNAUTHENTICATED"
        )
        problem(client.get("/v1/auth/keys", auth=("admin", "wrong")), 401, "UNAUTHENTICATED")
        assert client.get("/healthz").status_code == 200
        own = "/internal/v1/ready"
        problem(client.get(own, headers=bearer(workers.admin)), 403, "INTERNAL_ONLY")
        assert client.get(own, headers=bearer(internal)).status_code == 200
        problem(client.get("/internal/v1/auth/refresh"), 401, "UNAUTHENTICATED")
    assert internal not in workers.supervisor.log.read_text()


def test_keys_and_acls_made_through_one_worker_hold_on_the_other_once_acknowledged(
    workers: Workers, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    zero, one = pair
    admin = bearer(workers.admin)
    created = zero.post("/v1/topics", json={"name": "orders", "partitions": 2}, headers=admin)
    assert created.status_code == 201, created.text
    assert {p["leader"] for p in created.json()["partitions"]} == {0, 1}
    made = zero.post("/v1/auth/keys", json={"principal": "alice"}, headers=admin)
    assert made.status_code == 201, made.text
    alice = bearer(made.json()["secret"])
    # Each step below is the very next request after the acknowledgement, on the other worker.
    denied = problem(one.get("/v1/cluster", headers=alice), 403, "ACL_DENIED")
    assert denied["principal"] == "alice"
    records = {"records": [{"key": f"k{i}", "value": i} for i in range(20)]}  # both partitions
    problem(one.post("/v1/topics/orders/records", json=records, headers=alice), 403, "ACL_DENIED")
    write = binding("alice", "topic", "orders", "write")
    assert zero.post("/v1/acls", json=write, headers=admin).status_code == 201
    produced = one.post("/v1/topics/orders/records", json=records, headers=alice)
    assert produced.status_code == 200, produced.text
    # the worker leading each partition authorized the forwarded part again: it knew too
    assert {r["partition"] for r in produced.json()["results"]} == {0, 1}
    deny = binding("alice", "topic", "orders", "write", permission="deny")
    assert one.post("/v1/acls", json=deny, headers=admin).status_code == 201
    problem(zero.post("/v1/topics/orders/records", json=records, headers=alice), 403, "ACL_DENIED")
    assert zero.request("DELETE", "/v1/acls", json=deny, headers=admin).status_code == 204
    assert one.post("/v1/topics/orders/records", json=records, headers=alice).status_code == 200
    listed = zero.get("/v1/acls", params={"principal": "alice"}, headers=admin).json()["acls"]
    assert listed == [write]

    basic = one.post("/v1/auth/keys", json={"principal": "bob", "type": "basic"}, headers=admin)
    assert basic.status_code == 201, basic.text
    as_bob = ("bob", basic.json()["secret"])
    assert problem(zero.get("/v1/cluster", auth=as_bob), 403, "ACL_DENIED")["principal"] == "bob"
    keys = zero.get("/v1/auth/keys", headers=admin).json()["keys"]
    assert {"alice", "bob"} <= {k["principal"] for k in keys}
    revoked = one.delete(f"/v1/auth/keys/{made.json()['key_id']}", headers=admin)
    assert revoked.status_code == 204
    problem(zero.get("/v1/cluster", headers=alice), 401, "UNAUTHENTICATED")
    problem(one.get("/v1/cluster", headers=alice), 401, "UNAUTHENTICATED")
    # only super users manage keys, on every worker
    assert problem(one.get("/v1/auth/keys", auth=as_bob), 403, "SUPER_USER_ONLY")


def test_a_quota_set_through_one_worker_holds_on_both_each_with_its_share(
    workers: Workers, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    zero, one = pair
    admin = bearer(workers.admin)
    made = zero.post("/v1/auth/keys", json={"principal": "quinn"}, headers=admin)
    quinn = bearer(made.json()["secret"])
    assert one.get("/v1/topics", headers=quinn).status_code == 200  # no quota yet
    put = zero.put("/v1/quotas/quinn", json={"requests_per_second": 0.01}, headers=admin)
    assert put.status_code == 200, put.text
    # the very next request, on the other worker, is held to it: each worker allows 1/2 of
    # the rate, so one request each and then a wait of ~1 / 0.005 s
    assert one.get("/v1/topics", headers=quinn).status_code == 200
    refused = problem(one.get("/v1/topics", headers=quinn), 429, "QUOTA_EXCEEDED")
    assert refused["retry_after_ms"] > 190_000
    assert zero.get("/v1/topics", headers=quinn).status_code == 200
    problem(zero.get("/v1/topics", headers=quinn), 429, "QUOTA_EXCEEDED")
    described = one.get("/v1/quotas/quinn", headers=admin).json()
    assert described["effective"]["requests_per_second"] == 0.01  # as configured
    assert one.delete("/v1/quotas/quinn", headers=admin).status_code == 204
    assert zero.get("/v1/topics", headers=quinn).status_code == 200


def test_jwts_and_client_certificates_name_their_principal_on_every_worker(
    workers: Workers,
) -> None:
    token = bearer(workers.signer.token("dave"))
    expired = bearer(workers.signer.token("dave", lifetime_s=-120))
    for worker in (0, 1):
        with closing(workers.on(worker)) as client:
            doc = problem(client.get("/v1/cluster", headers=token), 403, "ACL_DENIED")
            assert doc["principal"] == "dave"
            problem(client.get("/v1/cluster", headers=expired), 401, "UNAUTHENTICATED")
        with closing(workers.on(worker, certificate=True)) as client:
            doc = problem(client.get("/v1/cluster"), 403, "ACL_DENIED")
            assert doc["principal"] == "carol"
    describe = binding("carol", "cluster", "cluster", "describe")
    with closing(workers.on(0)) as zero:
        answer = zero.post("/v1/acls", json=describe, headers=bearer(workers.admin))
        assert answer.status_code == 201, answer.text
    with closing(workers.on(1, certificate=True)) as carol:
        assert carol.get("/v1/cluster").status_code == 200


def test_keys_made_offline_on_the_data_dir_of_running_workers(
    workers: Workers, pair: tuple[httpx.Client, httpx.Client]
) -> None:
    data = str(workers.supervisor.data_dir)
    key = create_key("--data-dir", data, "--principal", "erin")
    for client in pair:  # at once: a worker meeting a key it does not know reads the file
        doc = problem(client.get("/v1/cluster", headers=bearer(key)), 403, "ACL_DENIED")
        assert doc["principal"] == "erin"
    listed = sluice("auth", "list-keys", "--data-dir", data)
    assert listed.returncode == 0, listed.stderr
    key_id = next(line.split()[0] for line in listed.stdout.splitlines() if "erin" in line)
    assert key_id in key
    revoked = sluice("auth", "revoke-key", "--data-dir", data, key_id)
    assert revoked.returncode == 0 and f"revoked {key_id}" in revoked.stdout, revoked.stderr
    for client in pair:  # each worker follows the file

        def refused(client: httpx.Client = client) -> bool:
            return client.get("/v1/cluster", headers=bearer(key)).status_code == 401

        until(refused, "the revoked key refused")


def test_keys_made_in_a_clusters_etcd(cluster: LocalCluster) -> None:  # noqa: F811
    endpoint = cluster.etcd.endpoint
    key = create_key("--cluster", endpoint, "--principal", "frank")
    for node in cluster.nodes:  # at once: a node meeting a key it does not know asks etcd
        answer = call("GET", f"{node.url}/v1/cluster", key)
        assert answer.status_code == 403 and answer.json()["principal"] == "frank", answer.text
    listed = sluice("auth", "list-keys", "--cluster", endpoint)
    assert listed.returncode == 0, listed.stderr
    key_id = next(line.split()[0] for line in listed.stdout.splitlines() if "frank" in line)
    assert key_id in key
    elsewhere = sluice("auth", "list-keys", "--cluster", endpoint, "--etcd-prefix", "/other")
    assert elsewhere.returncode == 0 and "frank" not in elsewhere.stdout, elsewhere.stderr
    # what the nodes made is there too
    made = call("POST", f"{cluster.nodes[0].url}/v1/auth/keys", CLUSTER_INTERNAL_KEY,
                json={"principal": "gina"})  # fmt: skip
    assert made.status_code == 201, made.text
    assert "gina" in sluice("auth", "list-keys", "--cluster", endpoint).stdout
    revoked = sluice("auth", "revoke-key", "--cluster", endpoint, key_id)
    assert revoked.returncode == 0 and f"revoked {key_id}" in revoked.stdout, revoked.stderr
    again = sluice("auth", "revoke-key", "--cluster", endpoint, key_id)
    assert again.returncode == 1 and "no credential has the id" in again.stderr
    for node in cluster.nodes:  # each node follows etcd with a watch

        def refused(url: str = node.url) -> bool:
            return call("GET", f"{url}/v1/cluster", key).status_code == 401

        until(refused, "the revoked key refused")


async def test_the_workers_stores_share_the_files_without_losing_changes(
    tmp_path: Path,
) -> None:
    """Two workers' stores on one directory (in one process: flock holds between two opens
    as between two processes), writing at once; each reads what the other wrote."""
    stores = [
        SharedFileAuthStore(tmp_path, poll_s=3600),
        SharedFileAuthStore(tmp_path, poll_s=3600),
    ]
    for store in stores:
        await store.start()
    try:
        bindings = [AclBinding.from_dict(binding(f"p{i}", "topic", "t", "read")) for i in range(20)]
        added = await asyncio.gather(*(stores[i % 2].add_acl(b) for i, b in enumerate(bindings)))
        assert all(added)
        key, record = new_api_key("hal")
        await stores[0].add_credential(record)
        for store in stores:
            await store.refresh()
            assert store.state.acls == frozenset(bindings)
            assert store.state.credentials.by_digest[key_digest(key)].principal == "hal"
        assert not await stores[1].add_acl(bindings[0])  # there already, written by the other
        assert await stores[1].remove_acl(bindings[0])
        assert not await stores[0].remove_acl(bindings[0])
        assert await stores[1].remove_credential(record.key_id)
        await stores[0].refresh()
        assert bindings[0] not in stores[0].state.acls
        assert record.key_id not in stores[0].state.credentials.by_id
    finally:
        for store in stores:
            await store.close()


def test_an_unreachable_etcd_is_said_in_one_line(tmp_path: Path) -> None:
    nowhere = f"etcd://127.0.0.1:{free_port()}"
    for args in (["create-key", "--principal", "x"], ["list-keys"], ["revoke-key", "abc"]):
        done = sluice("auth", *args, "--cluster", nowhere)
        assert done.returncode == 1
        assert done.stderr.startswith(f"sluice: cannot reach etcd at {nowhere}:"), done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    both = sluice("auth", "list-keys", "--cluster", nowhere, "--data-dir", str(tmp_path))
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
