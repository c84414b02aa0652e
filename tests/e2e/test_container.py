"""The Dockerfile and compose.yaml, tested without Docker (no image can be built or pulled on
the development machines).

The Dockerfile's ENTRYPOINT + CMD and its HEALTHCHECK run here in the venv; compose.yaml's
commands are parsed by `sluice serve`'s own parser and checked against the services they
name; then its topology (etcd with the compose command, three nodes with theirs) runs on
loopback, every compose address translated to a free local port."""

from __future__ import annotations

import ast
import json
import os
import re
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

from gateway.cli.main import parser
from gateway.workers.local_cluster import ETCD_MAX_TXN_OPS, free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = REPO / "compose.yaml"
BASE_IMAGE = "python:3.11-slim-bookworm"
DEADLINE_S = 30.0
POLL_S = 0.05


# ---- reading the Dockerfile ---------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """Logical instructions: continuations joined, comments and blank lines dropped."""
    out: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation, as Docker does
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a line continuation"
    return out


def stages(parsed: list[Instruction]) -> list[list[Instruction]]:
    """The build stages, each starting with its FROM."""
    out: list[list[Instruction]] = []
    for instruction in parsed:
        if instruction.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def only(stage: list[Instruction], keyword: str) -> str:
    found = [i.args for i in stage if i.keyword == keyword]
    assert found, f"the final stage has no {keyword}"
    return found[-1]  # the last one wins, as in Docker


def exec_form(args: str) -> list[str]:
    """A JSON-array (exec form) argument; the shell form is not accepted."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command(args: str) -> list[str]:
    match = re.fullmatch(r"((?:--[a-z-]+=\S+\s+)*)CMD\s+(\[.*\])", args, re.DOTALL)
    assert match, f"HEALTHCHECK is not `[--option=value ...] CMD [exec form]`: {args}"
    return exec_form(match[2])


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return instructions(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def final(dockerfile: list[Instruction]) -> list[Instruction]:
    return stages(dockerfile)[-1]


def image_command(final: list[Instruction]) -> list[str]:
    """What the container runs: ENTRYPOINT + CMD."""
    return exec_form(only(final, "ENTRYPOINT")) + exec_form(only(final, "CMD"))


# ---- running commands here ----------------------------------------------------------------


def venv_sluice() -> str:
    """The venv's `sluice` console script: the image's `sluice` on PATH."""
    beside = Path(sys.executable).parent / "sluice"
    found = str(beside) if beside.exists() else shutil.which("sluice")
    assert found, "no `sluice` console script: pip install -e . in the venv"
    return found


def replace_options(argv: Sequence[str], values: dict[str, str]) -> list[str]:
    """`argv` with the value of each option in `values` replaced (`--opt V` or `--opt=V`);
    every one of them must be there."""
    out = list(argv)
    for option, value in values.items():
        positions = [i for i, a in enumerate(out) if a == option or a.startswith(option + "=")]
        assert positions, f"{option} is not in {argv}"
        for i in positions:
            if out[i] == option:
                out[i + 1] = value
            else:
                out[i] = f"{option}={value}"
    return out


def option_value(argv: Sequence[str], option: str) -> str:
    for i, arg in enumerate(argv):
        if arg == option:
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{option} is not in {argv}")


def get(url: str) -> tuple[int, Any]:
    """(status, decoded JSON body); (0, None) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")
    except (OSError, ValueError):
        return 0, None


def post(url: str, body: object) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


def answering(url: str) -> Callable[[], Any]:
    """A `wait_for` check: the JSON body once `url` answers 200, else None."""

    def check() -> Any:
        status, body = get(url)
        return body if status == 200 else None

    return check


def lists_topic(url: str, name: str, partitions: int) -> Callable[[], bool]:
    """A `wait_for` check: the node at `url` lists the topic."""
    topics = answering(f"{url}/v1/topics")

    def check() -> bool:
        listing = topics() or {}
        return {"name": name, "partitions": partitions} in listing.get("topics", [])

    return check


def log_tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path} is missing)"
    return f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(
    what: str,
    check: Callable[[], Any],
    processes: Sequence[tuple[subprocess.Popen[bytes], Path]] = (),
    deadline_s: float = DEADLINE_S,
    detail: Callable[[], Any] | None = None,
) -> Any:
    """Poll `check` until it returns something truthy; fail at the deadline (showing the last
    result, or `detail()`, and the logs), or at once if one of `processes` exits."""
    deadline = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < deadline:
        for process, log in processes:
            if process.poll() is not None:
                pytest.fail(
                    f"{process.args!r} exited with {process.returncode} while waiting for "
                    f"{what}\n{log_tail(log)}",
                    pytrace=False,
                )
        last = check()
        if last:
            return last
        time.sleep(POLL_S)
    logs = "\n".join(log_tail(log) for _, log in processes)
    seen = last if detail is None else detail()
    pytest.fail(f"timed out waiting for {what}; last: {seen!r}\n{logs}", pytrace=False)


class Processes:
    """Started processes, logged to files; all stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self) -> None:
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, argv: Sequence[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.started.append((process, log))
        return process

    def stop(self, process: subprocess.Popen[bytes], timeout: float = DEADLINE_S) -> int:
        """SIGTERM, as `docker stop` sends; the exit status (SIGKILL after the timeout)."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def stop_all(self) -> None:
        for process, _ in reversed(self.started):  # dependents before what they depend on
            self.stop(process, timeout=10)


@pytest.fixture
def processes() -> Iterator[Processes]:
    running = Processes()
    try:
        yield running
    finally:
        running.stop_all()


# ---- the Dockerfile -----------------------------------------------------------------------


def test_dockerfile_builds_the_wheel_and_runs_it_slim_and_unprivileged(
    dockerfile: list[Instruction], final: list[Instruction]
) -> None:
    defaults = {
        name: value
        for name, _, value in (
            i.args.partition("=") for i in dockerfile if i.keyword == "ARG" and "=" in i.args
        )
    }
    built = stages(dockerfile)
    assert len(built) >= 2, "a multi-stage build: the wheel is built apart from the image"
    for stage in built:
        image = stage[0].args.split()[0]
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], image)
        assert resolved == BASE_IMAGE
    build_runs = " ".join(i.args for s in built[:-1] for i in s if i.keyword == "RUN")
    assert "gcc" in build_runs and "pip wheel" in build_runs
    final_runs = " ".join(i.args for i in final if i.keyword == "RUN")
    assert "gcc" not in final_runs
    assert "--no-index" in final_runs, "the final stage installs only the wheels built above"

    user = only(final, "USER").split(":")[0]
    assert user not in ("root", "0")
    assert "/data" in exec_form(only(final, "VOLUME"))
    assert only(final, "EXPOSE").split() == ["8080"]

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    command = image_command(final)
    assert command[:2] == ["sluice", "serve"] and command[0] in scripts
    args = parser().parse_args(command[1:])
    assert (args.command, args.host, args.port, args.data_dir) == (
        "serve",
        "0.0.0.0",
        8080,
        Path("/data"),
    )
    check = healthcheck_command(only(final, "HEALTHCHECK"))
    assert check[:2] == ["python", "-c"]
    assert "http://127.0.0.1:8080/healthz" in check[2], "the health check probes the CMD's port"


def c_extensions() -> set[str]:
    """The C extension modules setup.py builds."""
    with mock.patch("setuptools.setup") as setup:
        runpy.run_path(str(REPO / "setup.py"))
    return {extension.name for extension in setup.call_args.kwargs["ext_modules"]}


def test_the_image_checks_that_every_c_extension_imports(final: list[Instruction]) -> None:
    """The extensions are optional in setup.py (a failed compile installs the slower Python
    paths without a word): the image build imports each, so an image without one fails."""
    runs = " ".join(i.args for i in final if i.keyword == "RUN")
    checks = re.findall(r'python -c "([^"]*)"', runs)
    assert checks, "the final stage runs no `python -c` import check"
    imported = {
        alias.name
        for check in checks
        for node in ast.walk(ast.parse(check))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    extensions = c_extensions()
    assert len(extensions) >= 5
    assert extensions <= imported, f"not imported by the image build: {extensions - imported}"


def dockerignore_patterns() -> list[re.Pattern[str]]:
    """.dockerignore as regular expressions, with Docker's rules: a pattern matches paths
    from the context root, `*` and `?` stay within one path element, `**` spans any number."""
    out = []
    for line in DOCKERIGNORE.read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        assert not pattern.startswith("!"), "ignored() does not handle exceptions (!)"
        regex = ""
        i = 0
        pattern = pattern.strip("/")
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i : end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        out.append(re.compile(regex))
    return out


def ignored(path: str, patterns: list[re.Pattern[str]]) -> bool:
    """Whether `path` (relative to the context root) stays out of the build context: it, or a
    directory above it, matches a pattern."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    return any(p.fullmatch(prefix) for p in patterns for prefix in prefixes)


def test_the_build_context_holds_what_the_dockerfile_copies(
    dockerfile: list[Instruction],
) -> None:
    patterns = dockerignore_patterns()
    for heavy in (
        ".venv/bin/python",
        ".git/HEAD",
        "data/__cluster/meta",
        "dev-cluster/node-0/x.log",
        ".pytest_cache/README.md",
        "gateway/_fetchjson.cpython-311-x86_64-linux-gnu.so",
        "gateway/groups/__pycache__/coordinator.cpython-311.pyc",
        "sluice.egg-info/PKG-INFO",
        "bench-out/bench-report.json",
    ):
        assert ignored(heavy, patterns), f"{heavy} goes into the build context"
    copied: set[str] = set()
    for instruction in dockerfile:
        if instruction.keyword == "COPY" and "--from" not in instruction.args:
            *sources, _ = shlex.split(instruction.args)
            copied.update(source.strip("/") for source in sources)
    context_files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *sorted(copied)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: no such file"
        assert any(t == source or t.startswith(source + "/") for t in context_files), source
    dropped = [path for path in context_files if ignored(path, patterns)]
    assert not dropped, f"the Dockerfile copies these, but .dockerignore drops them: {dropped}"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert {"pyproject.toml", "setup.py", pyproject["project"]["readme"]} <= copied
    for include in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = include.removesuffix("*")
        assert package in copied, f"the wheel needs the {package} package; COPY it"


def test_the_license_is_an_spdx_expression_the_build_reads() -> None:
    """PEP 639's form, a string naming an SPDX expression: setuptools deprecates the TOML table
    (`{text = ...}`) and stops building projects that use it after 2027-02-18. setuptools 77 is
    the first to read the string, so the build requires at least that."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    expression = pyproject["project"]["license"]
    assert isinstance(expression, str)
    assert canonicalize_license_expression(expression) == expression
    [setuptools] = [
        r for r in map(Requirement, pyproject["build-system"]["requires"]) if r.name == "setuptools"
    ]
    assert setuptools.specifier.contains("77.0")
    assert not setuptools.specifier.contains("76.1.0")


def test_the_image_command_serves_and_stops_on_sigterm(
    final: list[Instruction], tmp_path: Path, processes: Processes
) -> None:
    port = free_port()
    data = tmp_path / "data"
    command = image_command(final)
    argv = [
        venv_sluice(),
        *replace_options(
            command[1:], {"--host": "127.0.0.1", "--port": str(port), "--data-dir": str(data)}
        ),
    ]
    log = tmp_path / "sluice.log"
    server = processes.start(argv, log, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    watched = [(server, log)]
    assert wait_for("/healthz", answering(f"{url}/healthz"), watched) == {"status": "ok"}
    assert wait_for("/readyz", answering(f"{url}/readyz"), watched)["status"] == "ready"
    assert data.is_dir() and any(data.iterdir()), "the node keeps its data in --data-dir"

    check = healthcheck_command(only(final, "HEALTHCHECK"))
    probe = [sys.executable, check[1], check[2].replace(":8080/", f":{port}/")]
    healthy = subprocess.run(probe, capture_output=True, text=True, timeout=DEADLINE_S)
    assert healthy.returncode == 0, healthy.stderr

    assert processes.stop(server) == 0, log_tail(log)
    assert "sluice listening on" in log.read_text()
    unhealthy = subprocess.run(probe, capture_output=True, text=True, timeout=DEADLINE_S)
    assert unhealthy.returncode != 0, "the health check passes with nothing listening"


# ---- compose.yaml -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def published(service: dict[str, Any]) -> list[tuple[int, int]]:
    """(host port, container port) pairs of a service's `ports`, short or long syntax."""
    out = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            out.append((int(entry["published"]), int(entry["target"])))
        else:
            *_, host, target = str(entry).split("/")[0].split(":")
            out.append((int(host), int(target)))
    return out


def sluice_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services built from this repository's Dockerfile."""
    return {name: s for name, s in compose["services"].items() if "build" in s}


def etcd_service(compose: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    found = [
        (name, s)
        for name, s in compose["services"].items()
        if str(s.get("image", "")).startswith("quay.io/coreos/etcd:v3.5")
    ]
    assert len(found) == 1, "one etcd service, from quay.io/coreos/etcd v3.5"
    return found[0]


def serve_args(final: list[Instruction], service: dict[str, Any]) -> Any:
    """The service's command as the image's `sluice serve` parses it."""
    assert "entrypoint" not in service, "the nodes run the image's ENTRYPOINT"
    return parser().parse_args([*exec_form(only(final, "ENTRYPOINT"))[1:], *command_of(service)])


def test_compose_nodes_are_sluice_serve_invocations_that_agree_with_the_topology(
    compose: dict[str, Any], final: list[Instruction]
) -> None:
    etcd_name, etcd = etcd_service(compose)
    etcd_command = command_of(etcd)
    assert Path(etcd_command[0]).name == "etcd"
    assert int(option_value(etcd_command, "--max-txn-ops")) >= ETCD_MAX_TXN_OPS
    client = urlsplit(option_value(etcd_command, "--advertise-client-urls").split(",")[0])
    assert client.hostname == etcd_name and client.port is not None
    assert "healthcheck" in etcd

    nodes = sluice_services(compose)
    assert len(nodes) == 3
    node_ids = []
    data_volumes = []
    for name, service in nodes.items():
        build = service["build"]
        context = REPO / (build if isinstance(build, str) else build.get("context", "."))
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile")
        assert (context / (dockerfile or "Dockerfile")).resolve() == DOCKERFILE
        args = serve_args(final, service)
        assert args.command == "serve"
        node_ids.append(args.node_id)
        assert args.cluster == (f"http://{etcd_name}:{client.port}",), name
        advertised = urlsplit(args.advertise)
        assert (advertised.scheme, advertised.hostname, advertised.port) == (
            "http",
            name,
            args.port,
        ), f"{name} must advertise itself at its own service name and port"
        assert args.host == "0.0.0.0", f"{name} must listen beyond the container's loopback"
        assert args.port in [target for _, target in published(service)]
        mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in service["volumes"]}
        assert mounts.get(str(args.data_dir)) in compose["volumes"], f"{name}: a named volume"
        data_volumes.append(mounts[str(args.data_dir)])
        assert service["depends_on"][etcd_name]["condition"] == "service_healthy"
    assert sorted(node_ids) == [0, 1, 2]
    assert len(set(data_volumes)) == 3, "each node has its own data volume"

    host_ports = [host for s in compose["services"].values() for host, _ in published(s)]
    assert len(host_ports) == len(set(host_ports)), "published ports collide"
    assert sorted(h for s in nodes.values() for h, _ in published(s)) == [8080, 8081, 8082]
    s3 = [n for n, s in compose["services"].items() if "motoserver/moto" in str(s.get("image"))]
    assert len(s3) == 1 and (5000, 5000) in published(compose["services"][s3[0]])
    bucket = compose["services"]["s3-bucket"]
    assert bucket["command"][-1] == f"http://{s3[0]}:5000/sluice"
    for name, service in nodes.items():
        args = serve_args(final, service)
        assert (args.s3_endpoint, args.s3_bucket) == (f"http://{s3[0]}:5000", "sluice"), name
        assert service["depends_on"]["s3-bucket"]["condition"] == "service_completed_successfully"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(service["environment"])


class Loopback:
    """Addresses on the compose network, (service, container port), mapped to loopback ports;
    0.0.0.0 in a service's own options means that service."""

    def __init__(self, services: Sequence[str]) -> None:
        self.ports: dict[tuple[str, int], int] = {}
        hosts = "|".join(re.escape(s) for s in sorted(services, key=len, reverse=True))
        self.pattern = re.compile(rf"(?<![\w.-])({hosts}|0\.0\.0\.0):(\d+)\b")

    def port(self, service: str, port: int) -> int:
        return self.ports.setdefault((service, port), free_port())

    def translate(self, argv: Sequence[str], service: str) -> list[str]:
        def local(match: re.Match[str]) -> str:
            owner = service if match[1] == "0.0.0.0" else match[1]
            return f"127.0.0.1:{self.port(owner, int(match[2]))}"

        return [self.pattern.sub(local, arg) for arg in argv]


@dataclass
class RunningNode:
    node_id: int
    process: subprocess.Popen[bytes]
    log: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def test_the_compose_topology_runs_on_loopback(
    compose: dict[str, Any], final: list[Instruction], tmp_path: Path, processes: Processes
) -> None:
    etcd_binary = shutil.which("etcd")
    if etcd_binary is None:  # as for the cluster tests
        pytest.fail("the etcd binary is missing: apt-get install etcd-server", pytrace=False)
    network = Loopback(list(compose["services"]))

    # `docker compose up`: etcd first, healthy before any node starts.
    etcd_name, etcd = etcd_service(compose)
    etcd_argv = replace_options(
        network.translate(command_of(etcd)[1:], etcd_name),
        {"--data-dir": str(tmp_path / "etcd-data")},
    )
    etcd_log = tmp_path / "etcd.log"
    etcd_process = processes.start([etcd_binary, *etcd_argv], etcd_log, cwd=tmp_path)
    client_url = option_value(etcd_argv, "--advertise-client-urls").split(",")[0]
    wait_for(
        "etcd to be healthy",
        lambda: (answering(f"{client_url}/health")() or {}).get("health") == "true",
        [(etcd_process, etcd_log)],
    )

    nodes: dict[str, RunningNode] = {}
    for name, service in sluice_services(compose).items():
        args = serve_args(final, service)
        port = network.port(name, args.port)
        argv = replace_options(
            network.translate(command_of(service), name),
            {"--host": "127.0.0.1", "--port": str(port), "--data-dir": str(tmp_path / name)},
        )
        log = tmp_path / f"{name}.log"
        command = [venv_sluice(), *exec_form(only(final, "ENTRYPOINT"))[1:], *argv]
        process = processes.start(command, log, cwd=tmp_path)
        nodes[name] = RunningNode(args.node_id, process, log, port)
    watched = [(etcd_process, etcd_log)] + [(n.process, n.log) for n in nodes.values()]
    # Each node's translated --advertise must be where that very node listens.
    expected = {(n.node_id, n.url, True) for n in nodes.values()}
    latest: list[Any] = []

    def settled() -> list[Any] | None:
        """Every node's /v1/cluster, once each lists the three nodes, alive, at the URLs they
        listen on, and the same controller."""
        views = [get(f"{node.url}/v1/cluster") for node in nodes.values()]
        latest[:] = views
        if any(status != 200 for status, _ in views):
            return None
        docs = [doc for _, doc in views]
        for doc in docs:
            if {(n["node_id"], n["url"], n["alive"]) for n in doc["nodes"]} != expected:
                return None
        controllers = {doc["controller"] for doc in docs}
        if len(controllers) != 1 or None in controllers:
            return None
        return docs

    views = wait_for("three live nodes and one controller", settled, watched, detail=lambda: latest)
    controller = views[0]["controller"]
    assert controller in {n.node_id for n in nodes.values()}
    assert len({view["cluster_id"] for view in views}) == 1

    # More partitions than etcd's default 128 operations per transaction, asked of a node that
    # is not the controller: forwarded to it at its advertised URL, and stored in the one
    # transaction that only the compose file's --max-txn-ops lets through.
    other = next(n for n in nodes.values() if n.node_id != controller)
    status, created = post(
        f"{other.url}/v1/topics", {"name": "compose", "partitions": 150, "replication_factor": 1}
    )
    assert status == 201, created
    assert len(created["partitions"]) == 150
    for node in nodes.values():
        wait_for(
            f"the topic on node {node.node_id}", lists_topic(node.url, "compose", 150), watched
        )

    # `docker compose down`: the nodes first (SIGTERM, a clean exit), then etcd.
    for name, node in nodes.items():
        assert processes.stop(node.process) == 0, (
            f"{name} did not stop cleanly\n{log_tail(node.log)}"
        )
    processes.stop(etcd_process)
