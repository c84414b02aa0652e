"""Authentication against a real `sluice serve --auth` process: keys from `sluice auth
create-key`, curl with bearer tokens and client certificates (HTTP/1.1 and h2), the README's
auth examples, and SIGHUP reloading certificates and keys without dropping connections."""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.e2e.conftest import Server, start_server, until
from tests.e2e.test_readme import examples, normalise
from tests.tls import write_client_ca, write_self_signed

SLUICE = str(Path(sys.executable).parent / "sluice")

FAST_ROUTE_TRIES = 20  # produces at most, for one served on the fast routes


def create_key(data_dir: Path, principal: str, *extra: str) -> str:
    done = subprocess.run(
        [SLUICE, "auth", "create-key", "--data-dir", str(data_dir), "--principal", principal,
         *extra],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert principal in done.stderr and done.stdout.strip() not in done.stderr
    return done.stdout.strip()


def curl(*args: str) -> tuple[int, str]:
    """curl's status code and body."""
    done = subprocess.run(
        ["curl", "-s", "-w", "\n%{http_code}", *args],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    data = tmp_path / "data"
    create_key(data, "admin")
    running = start_server(data, "--auth", "--super-user", "admin")
    yield running
    assert running.stop() == 0


def test_a_key_from_the_cli_opens_the_api(server: Server) -> None:
    admin = (server.data_dir / "auth" / "keys.json").read_text()
    assert "sluice_" not in admin  # only hashes on disk
    status, body = curl(f"{server.url}/v1/cluster")
    assert status == 401 and orjson.loads(body)["code"] == "UNAUTHENTICATED"
    alice = create_key(server.data_dir, "alice")  # while it runs
    status, body = curl(f"{server.url}/v1/cluster", "-H", f"Authorization: Bearer {alice}")
    assert status == 403 and orjson.loads(body)["code"] == "ACL_DENIED"
    assert curl(f"{server.url}/healthz")[0] == 200
    listed = subprocess.run(
        [SLUICE, "auth", "list-keys", "--data-dir", str(server.data_dir)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "alice" in listed and alice not in listed


def test_a_plain_produce_needs_credentials(server: Server) -> None:
    """A plain produce (the fast routes', gateway.api.fast_routes) needs credentials and the
    ACL as any route does."""
    admin = create_key(server.data_dir, "admin")
    created = curl(
        f"{server.url}/v1/topics", "-H", f"Authorization: Bearer {admin}",
        "-H", "Content-Type: application/json", "-d", '{"name": "t"}',
    )  # fmt: skip
    assert created[0] == 201, created
    produce = [f"{server.url}/v1/topics/t/records", "-H", "Content-Type: application/json",
               "-d", '{"records": [{"value": 1}]}']  # fmt: skip
    status, body = curl(*produce)
    assert status == 401 and orjson.loads(body)["code"] == "UNAUTHENTICATED"
    alice = create_key(server.data_dir, "alice")
    status, body = curl(*produce, "-H", f"Authorization: Bearer {alice}")
    assert status == 403 and orjson.loads(body)["code"] == "ACL_DENIED"
    assert curl(*produce, "-H", f"Authorization: Bearer {admin}")[0] == 200


def sluice(server: Server, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLUICE_URL": server.url, "SLUICE_KEY": key}
    return subprocess.run(
        [SLUICE, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_acls_and_keys_from_the_cli(server: Server) -> None:
    admin = create_key(server.data_dir, "admin")
    bob = create_key(server.data_dir, "bob")
    added = sluice(server, admin, "acls", "add", "--principal", "bob", "--cluster",
                   "--operation", "describe", "--operation", "alter")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert [b["operation"] for b in orjson.loads(added.stdout)] == ["describe", "alter"]
    assert curl(f"{server.url}/v1/cluster", "-H", f"Authorization: Bearer {bob}")[0] == 200
    listed = sluice(server, admin, "acls", "list", "--principal", "bob", "--output", "table")
    assert [line.split() for line in listed.stdout.splitlines()[1:]] == [
        ["bob", "cluster", "cluster", "literal", operation, "allow"]
        for operation in ("alter", "describe")
    ]
    removed = sluice(server, bob, "acls", "remove", "--principal", "bob", "--cluster",
                     "--operation", "describe", "--operation", "alter")  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    assert curl(f"{server.url}/v1/cluster", "-H", f"Authorization: Bearer {bob}")[0] == 403
    again = sluice(server, admin, "acls", "remove", "--principal", "bob", "--cluster",
                   "--operation", "describe")  # fmt: skip
    assert again.returncode != 0 and "ACL_NOT_FOUND" in again.stderr
    refused = sluice(server, bob, "topics", "list")
    assert refused.returncode == 0 and refused.stdout == ""  # nothing bob may describe
    made = sluice(server, admin, "auth", "create-key", "--principal", "carol")
    assert made.returncode == 0 and made.stdout.startswith("sluice_"), made.stderr
    keys = sluice(server, admin, "auth", "list-keys")
    carol = next(line.split()[0] for line in keys.stdout.splitlines() if "carol" in line)
    revoked = sluice(server, admin, "auth", "revoke-key", carol)
    assert revoked.returncode == 0, revoked.stderr
    token = made.stdout.strip()
    assert curl(f"{server.url}/v1/cluster", "-H", f"Authorization: Bearer {token}")[0] == 401
    offline = sluice(server, "", "auth", "revoke-key", "--data-dir", str(server.data_dir), "x")
    assert offline.returncode != 0 and "no credential" in offline.stderr


def test_the_readme_auth_examples(tmp_path: Path) -> None:
    """The README's `console-auth` blocks, in order, in the directory where the README made
    admin.key and started `sluice serve --auth --super-user admin`."""
    assert len(examples("console-auth")) >= 5
    (tmp_path / "admin.key").write_text(create_key(tmp_path / "data", "admin") + "\n")
    running = start_server(tmp_path / "data", "--auth", "--super-user", "admin")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SLUICE_URL": f"http://localhost:{running.port}",
    }
    try:
        for command, expected in examples("console-auth"):
            live = command.replace("localhost:8080", f"localhost:{running.port}")
            done = subprocess.run(
                ["bash", "-c", live], capture_output=True, text=True, timeout=60, check=False,
                env=env, cwd=tmp_path,
            )  # fmt: skip
            assert done.returncode == 0, (command, done.stderr)
            assert normalise(done.stdout) == normalise(expected), (command, done.stdout)
    finally:
        assert running.stop() == 0


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Server, Path, Path, Path, str]]:
    """--auth over TLS with client certificates from a test CA; alice's certificate."""
    cert, key = write_self_signed(tmp_path)
    ca, client, client_key = write_client_ca(tmp_path, "alice")
    data = tmp_path / "data"
    admin = create_key(data, "admin")
    running = start_server(
        data, "--auth", "--super-user", "admin", "--tls-cert", str(cert), "--tls-key", str(key),
        "--tls-client-ca", str(ca),
    )  # fmt: skip
    yield running, cert, client, client_key, admin
    assert running.stop() == 0


@pytest.mark.parametrize("protocol", ["--http1.1", "--http2"])
def test_mutual_tls_names_the_principal(
    tls_server: tuple[Server, Path, Path, Path, str], protocol: str
) -> None:
    server, cert, client, client_key, admin = tls_server
    url = f"https://localhost:{server.port}/v1/cluster"
    with_cert = [protocol, "--cacert", str(cert), "--cert", str(client), "--key", str(client_key)]
    status, body = curl(*with_cert, url)
    assert status == 403, body
    assert orjson.loads(body)["principal"] == "alice"
    assert curl(protocol, "--cacert", str(cert), url)[0] == 401
    acl = orjson.dumps(
        {"principal": "alice", "resource_type": "cluster", "resource_name": "cluster",
         "pattern_type": "literal", "operation": "describe", "permission": "allow"}
    ).decode()  # fmt: skip
    status, body = curl(
        "--cacert", str(cert), "-X", "POST", f"https://localhost:{server.port}/v1/acls",
        "-H", f"Authorization: Bearer {admin}", "-H", "Content-Type: application/json",
        "-d", acl,
    )  # fmt: skip
    assert status in (200, 201), body
    assert curl(*with_cert, url)[0] == 200


@pytest.mark.parametrize("protocol", ["--http1.1", "--http2"])
def test_a_client_certificate_opens_the_fast_routes(
    tls_server: tuple[Server, Path, Path, Path, str], protocol: str
) -> None:
    """A produce made with a client certificate alone is the fast routes' (they read the
    connection's certificate as the middleware does): refused as the Application refuses it
    until alice may write, then served."""
    server, cert, client, client_key, admin = tls_server
    base = f"https://localhost:{server.port}"
    bearer = ["-H", f"Authorization: Bearer {admin}"]
    created = curl("--cacert", str(cert), f"{base}/v1/topics", *bearer,
                   "-H", "Content-Type: application/json", "-d", '{"name": "t"}')  # fmt: skip
    assert created[0] == 201, created
    with_cert = [protocol, "--cacert", str(cert), "--cert", str(client), "--key", str(client_key)]

    def produce(content_type: str) -> tuple[int, str]:
        body = '{"records": [{"value": 1}]}'
        return curl(*with_cert, f"{base}/v1/topics/t/records", "-H",
                    f"Content-Type: {content_type}", "-d", body)  # fmt: skip

    def fast_served() -> int:
        metrics = curl("--cacert", str(cert), f"{base}/metrics", *bearer)[1]
        found = re.search(r"^sluice_lane_requests_total (\S+)$", metrics, re.MULTILINE)
        assert found is not None
        return int(float(found.group(1)))

    fast, general = produce("application/json"), produce("application/json; charset=utf-8")
    assert fast == general and fast[0] == 403 and orjson.loads(fast[1])["principal"] == "alice"
    acl = orjson.dumps(
        {"principal": "alice", "resource_type": "topic", "resource_name": "t",
         "pattern_type": "literal", "operation": "write", "permission": "allow"}
    ).decode()  # fmt: skip
    granted = curl("--cacert", str(cert), "-X", "POST", f"{base}/v1/acls", *bearer,
                   "-H", "Content-Type: application/json", "-d", acl)  # fmt: skip
    assert granted[0] == 201, granted
    # The fast routes take a request whose body arrived with its head: over HTTP/2 a DATA frame
    # read a moment after the HEADERS sends it the Application's way (the same answer, byte for
    # byte), which a loaded machine makes likely. So produce until one is counted there.
    for _ in range(FAST_ROUTE_TRIES):
        before = fast_served()
        assert produce("application/json")[0] == 200
        if fast_served() > before:
            break
    else:
        raise AssertionError(f"none of {FAST_ROUTE_TRIES} produces went the fast routes' way")


def _served_certificate(port: int) -> bytes:
    """The certificate a new handshake gets (not verified: only compared)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port))
    with context.wrap_socket(raw, server_hostname="localhost") as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_sighup_reloads_the_certificate_without_dropping_connections(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    cert, key = write_self_signed(first)
    data = tmp_path / "data"
    admin = create_key(data, "admin")
    running = start_server(
        data, "--auth", "--super-user", "admin", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    try:
        old = _served_certificate(running.port)
        context = ssl.create_default_context(cafile=str(cert))
        kept = http.client.HTTPSConnection("localhost", running.port, context=context)
        headers = {"Authorization": f"Bearer {admin}"}
        kept.request("GET", "/v1/cluster", headers=headers)
        assert kept.getresponse().read() and kept.sock is not None
        sock = kept.sock
        new_cert, new_key = write_self_signed(second)
        cert.write_bytes(new_cert.read_bytes())
        key.write_bytes(new_key.read_bytes())
        late = create_key(data, "late")
        running.process.send_signal(signal.SIGHUP)
        until(lambda: _served_certificate(running.port) != old, "the new certificate")
        kept.request("GET", "/v1/cluster", headers=headers)
        answer = kept.getresponse()
        assert answer.status == 200 and answer.read()
        assert kept.sock is sock  # the connection made before the reload is still the same
        kept.close()
        status, _ = curl("--cacert", str(cert), f"https://localhost:{running.port}/v1/cluster",
                         "-H", f"Authorization: Bearer {late}")  # fmt: skip
        assert status == 403  # the key file was read again too: known, but no ACL
    finally:
        assert running.stop() == 0
