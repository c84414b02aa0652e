"""Where the cluster's nodes live on the network, and the link faults the tests inject there.

Two mechanisms, one interface (`Topology`):

- `NamespaceTopology` (root, `ip netns`, veth, `tc`): each node runs in a network namespace of
  its own (`ip netns exec`, which execs in place, so signals reach the node). Every pair of
  nodes has a veth link of its own, and each node a link to the host, where etcd and the test
  client are. A node advertises an address on its namespace's loopback; the others reach it
  over their direct link to it (the host does not forward). Faults act on the links: `ip link
  set down` (connections fail at once) or a `tc` blackhole qdisc on a link end (packets from
  that end vanish: connections hang, as in a real partition).
- `ProxyTopology` (anywhere): nodes listen on loopback and advertise a TCP proxy each; each node
  reaches etcd through a proxy of its own. The node-to-node proxies tell which node opened a
  connection from the kernel's socket table (/proc/net/tcp and the nodes' descriptors). A cut
  direction stalls its bytes until healed (a partition that heals before TCP gives up).

`detect()` says which one can run here; `--partition-mechanism` forces one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from gateway.workers.local_cluster import free_port

NETNS_PREFIX = "sluicet"  # namespaces: sluicet-<pid>-n<i>; <pid> is the owning test process
_NETNS_RE = re.compile(rf"^{NETNS_PREFIX}-(\d+)-")
NODE_PORT = 9092  # every node has an address of its own in its namespace


@dataclass(frozen=True)
class LinkFault:
    """One fault on the network.

    kind: "cut" (the a-b link down both ways), "blackhole" (a-b packets dropped both ways),
    "one-way" (packets from a to b dropped), "isolate" (a cut off from every other node),
    "etcd" (a cut off from etcd, and from the test client where they share a link)."""

    kind: str
    a: int
    b: int | None = None

    def __str__(self) -> str:
        return f"{self.kind}({self.a}{'' if self.b is None else f',{self.b}'})"


PAIR_KINDS = ("cut", "blackhole", "one-way")
NODE_KINDS = ("isolate", "etcd")


@dataclass(frozen=True)
class NodeSpec:
    """How to start node i: where it listens, what it advertises, how it reaches etcd."""

    host: str
    port: int
    wrapper: tuple[str, ...]
    advertise: str | None
    etcd: str  # the --cluster value


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=check, timeout=30)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_unavailable_reason() -> str | None:
    """None if namespaces and veth links can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command"
    name = f"{NETNS_PREFIX}-{os.getpid()}-probe"
    veth = f"s{_base36(os.getpid())}p"
    try:
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b")
            _run("ip", "link", "set", veth + "b", "netns", name)
            _run("tc", "qdisc", "add", "dev", veth + "a", "root", "blackhole")
        finally:
            _run("ip", "link", "del", veth + "a", check=False)
            _run("ip", "netns", "del", name, check=False)
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"ip netns/veth/tc failed: {detail.strip()}"
    return None


def detect(forced: str | None) -> tuple[str, str]:
    """(mechanism, why): `forced` if given, else netns where it works, else proxy."""
    if forced == "proxy":
        return "proxy", "forced by --partition-mechanism"
    reason = netns_unavailable_reason()
    if forced == "netns":
        if reason is not None:
            raise RuntimeError(f"--partition-mechanism netns: {reason}")
        return "netns", "forced by --partition-mechanism"
    if reason is None:
        return "netns", "root with ip netns, veth and tc"
    return "proxy", f"network namespaces unavailable ({reason})"


def reap_stale(marker: str) -> list[str]:
    """Clean up after test processes that died without cleaning up (SIGKILL, power loss): their
    namespaces (the veths in them go too) and node processes whose command line holds `marker`
    followed by the dead owner's pid. Returns what was removed."""
    removed: list[str] = []
    netns_dir = Path("/run/netns")
    if netns_dir.is_dir():
        for entry in sorted(netns_dir.iterdir()):
            match = _NETNS_RE.match(entry.name)
            if match is None or _pid_alive(int(match.group(1))):
                continue
            pids = _run("ip", "netns", "pids", entry.name, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run("ip", "netns", "del", entry.name, check=False)
            removed.append(f"netns {entry.name}")
    # A namespace outlives its name while anything still holds it (a dead node's orphaned TCP
    # sockets do, for minutes): delete the host ends of its links, which takes their peers.
    veths = _run("ip", "-o", "link", "show", "type", "veth", check=False).stdout
    for name in re.findall(r"^\d+: (s[0-9a-z]+h\d)[@:]", veths, flags=re.M):
        owner = int(name[1:-2], 36)
        if not _pid_alive(owner):
            _run("ip", "link", "del", name, check=False)
            removed.append(f"link {name}")
    pattern = re.compile(re.escape(marker) + r"-(\d+)\b")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        match = pattern.search(cmdline)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(proc.name), signal.SIGKILL)
            removed.append(f"process {proc.name}")
    return removed


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


class Topology(ABC):
    """Node addresses and link faults; faults compose (a link is cut while any fault cuts it)."""

    mechanism: str

    def __init__(self, size: int) -> None:
        if not 1 <= size <= 9:
            raise ValueError("1 to 9 nodes")
        self.size = size
        self.active: list[LinkFault] = []
        # A schedule applies and reverts overlapping faults from worker threads at once; two
        # syncs computing the same change would both run it (`tc qdisc del` twice fails).
        self._changing = threading.Lock()

    @abstractmethod
    def setup(self, etcd_port: int) -> None: ...

    @abstractmethod
    def etcd_listen_hosts(self) -> list[str]: ...

    @abstractmethod
    def node_spec(self, i: int) -> NodeSpec: ...

    @abstractmethod
    def client_url(self, i: int) -> str:
        """Where the test client reaches node i."""

    @abstractmethod
    def _sync(self) -> None:
        """Make the network match `self.active`."""

    @abstractmethod
    def close(self) -> None:
        """Remove everything setup() made (idempotent)."""

    def set_pids(self, pids: Callable[[], dict[int, int]]) -> None:  # noqa: B027 - optional
        """Give the topology the node processes' pids (pid -> node id), if it needs them."""

    def apply(self, fault: LinkFault) -> None:
        self._check(fault)
        with self._changing:
            self.active.append(fault)
            self._sync()

    def revert(self, fault: LinkFault) -> None:
        with self._changing:
            if fault in self.active:
                self.active.remove(fault)
                self._sync()

    def heal(self) -> None:
        with self._changing:
            if self.active:
                self.active.clear()
                self._sync()

    def _check(self, fault: LinkFault) -> None:
        nodes = range(self.size)
        if fault.a not in nodes:
            raise ValueError(f"no node {fault.a}")
        if fault.kind in PAIR_KINDS:
            if fault.b not in nodes or fault.b == fault.a:
                raise ValueError(f"{fault}: needs two different nodes")
        elif fault.kind not in NODE_KINDS:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _blocked_directions(self) -> set[tuple[int | str, int | str]]:
        """(from, to) pairs whose packets are dropped; "etcd" stands for etcd (and the host)."""
        blocked: set[tuple[int | str, int | str]] = set()
        for f in self.active:
            if f.kind in ("cut", "blackhole"):
                assert f.b is not None
                blocked |= {(f.a, f.b), (f.b, f.a)}
            elif f.kind == "one-way":
                assert f.b is not None
                blocked.add((f.a, f.b))
            elif f.kind == "isolate":
                for other in range(self.size):
                    if other != f.a:
                        blocked |= {(f.a, other), (other, f.a)}
            elif f.kind == "etcd":
                blocked |= {(f.a, "etcd"), ("etcd", f.a)}
        return blocked


# -- network namespaces ----------------------------------------------------------------------------


class NamespaceTopology(Topology):
    """A namespace per node, a veth link per node pair and one per node to the host."""

    mechanism = "netns"

    def __init__(self, size: int, owner_pid: int | None = None) -> None:
        super().__init__(size)
        pid = owner_pid or os.getpid()
        self.tag = _base36(pid)
        self.namespaces = [f"{NETNS_PREFIX}-{pid}-n{i}" for i in range(size)]
        self.net = self._pick_subnet(pid)
        self.etcd_port = 0
        self._created: list[str] = []  # namespaces made, for close()
        self._host_links: list[str] = []
        self._down: set[tuple[int, int]] = set()  # mesh links (i < j) set down
        self._holes: set[tuple[str, str]] = set()  # (namespace or "", device) with a blackhole

    # addresses in 10.X.Y.0/24: host links .4i/30, pair links .64+4k/30, node addresses .200+i
    def _addr(self, offset: int) -> str:
        return str(self.net.network_address + offset)

    def host_side(self, i: int) -> str:
        return self._addr(4 * i + 1)

    def node_side(self, i: int) -> str:
        return self._addr(4 * i + 2)

    def service(self, i: int) -> str:
        return self._addr(200 + i)

    def _pair_index(self, i: int, j: int) -> int:
        a, b = min(i, j), max(i, j)
        return [(x, y) for x in range(self.size) for y in range(x + 1, self.size)].index((a, b))

    def _pair_addr(self, i: int, j: int) -> str:
        """Node i's address on its link to node j."""
        k = self._pair_index(i, j)
        return self._addr(64 + 4 * k + (1 if i < j else 2))

    def host_dev(self, i: int) -> str:
        return f"s{self.tag}h{i}"

    def node_dev(self, i: int) -> str:
        return f"s{self.tag}n{i}"

    def pair_dev(self, i: int, j: int) -> str:
        """Node i's end of its link to node j (in node i's namespace)."""
        return f"s{self.tag}m{i}{j}"

    @staticmethod
    def _pick_subnet(pid: int) -> ipaddress.IPv4Network:
        used = []
        for line in _run("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
            word = line.split()[0] if line.split() else ""
            if word in ("default", "broadcast", "local", "unreachable", "blackhole"):
                word = line.split()[1] if len(line.split()) > 1 else ""
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(word, strict=False))
        for n in range(1000):
            index = (pid * 7919 + n) % (190 * 256)
            candidate = ipaddress.IPv4Network(f"10.{64 + index // 256}.{index % 256}.0/24")
            if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
                return candidate
        raise RuntimeError("no free 10.x.y.0/24 subnet for the test namespaces")

    def setup(self, etcd_port: int) -> None:
        self.etcd_port = etcd_port
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        for i, ns in enumerate(self.namespaces):
            _run("ip", "netns", "add", ns)
            self._created.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.service(i)}/32", "dev", "lo")
            host, node = self.host_dev(i), self.node_dev(i)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", node)
            self._host_links.append(host)
            _run("ip", "link", "set", node, "netns", ns)
            _run("ip", "addr", "add", f"{self.host_side(i)}/30", "dev", host)
            _run("ip", "link", "set", host, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.node_side(i)}/30", "dev", node)
            _run("ip", "-n", ns, "link", "set", node, "up")
            _run(
                "ip", "route", "replace", f"{self.service(i)}/32",
                "via", self.node_side(i), "dev", host,
            )  # fmt: skip
        for i in range(self.size):
            for j in range(i + 1, self.size):
                a, b = self.pair_dev(i, j), self.pair_dev(j, i)
                _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
                _run("ip", "link", "set", a, "netns", self.namespaces[i])
                _run("ip", "link", "set", b, "netns", self.namespaces[j])
                for x, y in ((i, j), (j, i)):
                    ns, dev = self.namespaces[x], self.pair_dev(x, y)
                    _run("ip", "-n", ns, "addr", "add", f"{self._pair_addr(x, y)}/30", "dev", dev)
                    self._link_up(x, y)

    def _link_up(self, x: int, y: int) -> None:
        """Node x's end of the x-y link up, with the route to y's address through it."""
        ns, dev = self.namespaces[x], self.pair_dev(x, y)
        _run("ip", "-n", ns, "link", "set", dev, "up")
        _run(
            "ip", "-n", ns, "route", "replace", f"{self.service(y)}/32",
            "via", self._pair_addr(y, x), "dev", dev,
        )  # fmt: skip

    def etcd_listen_hosts(self) -> list[str]:
        return [self.host_side(i) for i in range(self.size)]

    def node_spec(self, i: int) -> NodeSpec:
        return NodeSpec(
            host=self.service(i),
            port=NODE_PORT,
            wrapper=("ip", "netns", "exec", self.namespaces[i]),
            advertise=None,
            etcd=f"etcd://{self.host_side(i)}:{self.etcd_port}",
        )

    def client_url(self, i: int) -> str:
        return f"http://{self.service(i)}:{NODE_PORT}"

    def _sync(self) -> None:
        down = {
            (min(f.a, f.b), max(f.a, f.b))
            for f in self.active
            if f.kind == "cut" and f.b is not None
        }
        holes: set[tuple[str, str]] = set()
        for src, dst in self._blocked_directions():
            if isinstance(src, int) and isinstance(dst, int):
                if (min(src, dst), max(src, dst)) not in down:
                    holes.add((self.namespaces[src], self.pair_dev(src, dst)))
            elif isinstance(src, int):  # to etcd: drop at the node's end of its host link
                holes.add((self.namespaces[src], self.node_dev(src)))
            else:  # from etcd (and the host) to node dst
                assert isinstance(dst, int)
                holes.add(("", self.host_dev(dst)))
        for i, j in sorted(down - self._down):
            for x, y in ((i, j), (j, i)):
                _run("ip", "-n", self.namespaces[x], "link", "set", self.pair_dev(x, y), "down")
        for ns, dev in sorted(holes - self._holes):
            _run("tc", *(("-n", ns) if ns else ()), "qdisc", "add", "dev", dev, "root", "blackhole")
        for ns, dev in sorted(self._holes - holes):
            _run("tc", *(("-n", ns) if ns else ()), "qdisc", "del", "dev", dev, "root")
        for i, j in sorted(self._down - down):
            self._link_up(i, j)
            self._link_up(j, i)
        self._down, self._holes = down, holes

    def close(self) -> None:
        for ns in self._created:
            # Deleting a namespace destroys the veth ends in it, and so their peers.
            _run("ip", "netns", "del", ns, check=False)
        for dev in self._host_links:
            if Path(f"/sys/class/net/{dev}").exists():
                _run("ip", "link", "del", dev, check=False)
        self._created.clear()
        self._host_links.clear()
        self._down.clear()
        self._holes.clear()
        self.active.clear()

    def leftovers(self) -> list[str]:
        """Namespaces or host links of this topology still present (none after close())."""
        left = [ns for ns in self.namespaces if Path(f"/run/netns/{ns}").exists()]
        left += [
            self.host_dev(i)
            for i in range(self.size)
            if Path(f"/sys/class/net/{self.host_dev(i)}").exists()
        ]
        return left


# -- TCP proxies -----------------------------------------------------------------------------------


def _socket_inodes_by_local_port() -> dict[int, set[str]]:
    """Local port -> inodes of the TCP sockets bound to it (IPv4 and IPv6 tables)."""
    found: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) < 10:
                    continue
                port = int(fields[1].rsplit(":", 1)[1], 16)
                found.setdefault(port, set()).add(fields[9])
    return found


def _owner(peer_port: int, pids: dict[int, int]) -> int | None:
    """The node whose process holds the socket with local port `peer_port`, if any."""
    inodes = _socket_inodes_by_local_port().get(peer_port, set())
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid, node in pids.items():
        fd_dir = Path(f"/proc/{pid}/fd")
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        return node
    return None


class ProxyTopology(Topology):
    """Nodes on loopback behind fault-injecting TCP proxies, run by a thread of their own."""

    mechanism = "proxy"

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.real_ports = [free_port() for _ in range(size)]
        self.node_proxy_ports = [free_port() for _ in range(size)]
        self.etcd_proxy_ports = [free_port() for _ in range(size)]
        self._pids: Callable[[], dict[int, int]] = dict
        self._blocked: set[tuple[int | str, int | str]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._changed: asyncio.Event | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    def set_pids(self, pids: Callable[[], dict[int, int]]) -> None:
        self._pids = pids

    def setup(self, etcd_port: int) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._call(self._start(etcd_port)).result(30)

    def _call(self, coro: Coroutine[object, object, None]) -> Future[None]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _start(self, etcd_port: int) -> None:
        self._changed = asyncio.Event()
        for i in range(self.size):
            node_server = await asyncio.start_server(
                self._handler(i, self.real_ports[i], None), "127.0.0.1", self.node_proxy_ports[i]
            )
            etcd_server = await asyncio.start_server(
                self._handler("etcd", etcd_port, i), "127.0.0.1", self.etcd_proxy_ports[i]
            )
            self._servers += [node_server, etcd_server]

    def _handler(
        self, target: int | str, port: int, source: int | None
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            src: int | str | None = source
            if src is None:
                peer_port = writer.get_extra_info("peername")[1]
                src = await asyncio.to_thread(_owner, peer_port, self._pids())
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            self._conns |= {writer, up_writer}
            try:
                await asyncio.gather(
                    self._pump(reader, up_writer, src, target),
                    self._pump(up_reader, writer, target, src),
                    return_exceptions=True,
                )
            finally:
                for w in (writer, up_writer):
                    self._conns.discard(w)
                    w.close()

        return handle

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        src: int | str | None,
        dst: int | str | None,
    ) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                while (src, dst) in self._blocked:  # stalled until healed
                    assert self._changed is not None
                    await self._changed.wait()
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()

    async def _set_blocked(self, blocked: set[tuple[int | str, int | str]]) -> None:
        self._blocked = blocked
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    def _sync(self) -> None:
        self._call(self._set_blocked(self._blocked_directions())).result(10)

    def etcd_listen_hosts(self) -> list[str]:
        return []

    def node_spec(self, i: int) -> NodeSpec:
        return NodeSpec(
            host="127.0.0.1",
            port=self.real_ports[i],
            wrapper=(),
            advertise=f"http://127.0.0.1:{self.node_proxy_ports[i]}",
            etcd=f"etcd://127.0.0.1:{self.etcd_proxy_ports[i]}",
        )

    def client_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.real_ports[i]}"

    async def _stop(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._conns):
            writer.close()
        self._servers.clear()

    def close(self) -> None:
        self.active.clear()
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._set_blocked(set())).result(10)
            self._call(self._stop()).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None


def make_topology(mechanism: str, size: int) -> Topology:
    if mechanism == "netns":
        return NamespaceTopology(size)
    if mechanism == "proxy":
        return ProxyTopology(size)
    raise ValueError(f"unknown partition mechanism {mechanism!r}")
