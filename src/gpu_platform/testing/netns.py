"""An isolated network of N nodes built from Linux network namespaces — a test HARNESS (root).

Layout (one run; `TAG` is unique per process and instance, so parallel runs do not collide)::

    root namespace                 gpn-TAG-br                         gpn-TAG-nK (K = 1..N)
    gpTAG 10.77.S.254/24 ==veth== host ─┐
                                        br0 (bridge) ─ nK ==veth== eth0 10.77.S.K/24, lo up

* Every node has its own namespace; its processes (`run`) see only `lo` and `eth0`.
* The bridge lives in its own namespace. The only thing added to the root namespace is one
  veth (`gpTAG`, the *host* side, address `host_ip`) and with it a connected route for the
  run's own /24, chosen free of every address and route already there; existing interfaces
  and routes are never touched. The test process reaches every node through it.
* `partition(groups)` installs blackhole routes inside the node namespaces: node A drops every
  packet addressed to a node B outside A's group (both directions, since the groups are
  symmetric). The host address is never cut, so a client can still talk to an isolated node
  and see that it cannot commit. Route changes invalidate the kernel's cached routes, so
  established TCP connections (gRPC channels) are cut as well as new ones. A blackhole route
  needs nothing beyond iproute2 (no iptables, nftables or `tc` qdisc modules).
* `close()` kills the processes it started, deletes the namespaces (which destroys their veths,
  the host side included) and is idempotent. Namespaces left behind by a run that was killed
  (`gpn-PID-...` with PID no longer alive) are removed when the next one starts.

`available()` says why the harness cannot run here (not root, no `ip`, namespaces refused), or
None. Errors: `NetnsError` (a `RuntimeError`) when an `ip` command fails, with its stderr.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["NetnsError", "NetnsNetwork", "available", "remove_stale"]

_PREFIX = "gpn-"
_SUBNETS = ipaddress.ip_network("10.77.0.0/16")
_HOST_OCTET = 254
_seq = itertools.count()


class NetnsError(RuntimeError):
    """An `ip` command failed; the message holds the command and its stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def available() -> str | None:
    """None when this process can build namespaces, else the reason it cannot."""
    if os.name != "posix" or not os.path.isdir("/proc/self/ns"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "ip not found: install Debian package iproute2 (make deps)"
    probe = f"{_PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add is not permitted here: {made.stderr.strip()}"
    try:
        veth = ("type", "veth", "peer", "name", "p1")
        link = _ip("-n", probe, "link", "add", "p0", *veth, check=False)
        if link.returncode != 0:
            return f"veth pairs are not permitted here: {link.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete `gpn-PID-*` namespaces whose creating process is gone; returns their names."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_namespace_processes(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 inside 10.77.0.0/16 that no address or route of the root namespace overlaps."""
    used = []
    text = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    for word in text.split():
        with contextlib.suppress(ValueError):
            used.append(ipaddress.ip_network(word, strict=False))
    start = os.getpid() % 250
    for k in range(250):
        net = ipaddress.ip_network(f"10.77.{(start + k) % 250 + 1}.0/24")
        if not any(net.overlaps(u) for u in used if u.version == 4 and u.prefixlen > 0):
            return net  # type: ignore[return-value]
    raise NetnsError(f"no free /24 left in {_SUBNETS}")


class NetnsNetwork:
    """N node namespaces on one bridge; see the module docstring. Not thread-safe."""

    def __init__(self, nodes: int) -> None:
        if not 1 <= nodes <= 250:
            raise ValueError(f"nodes must be in 1..250, got {nodes}")
        remove_stale()
        self.tag = f"{os.getpid()}-{next(_seq)}"
        self.ids = list(range(1, nodes + 1))
        self.bridge_ns = f"{_PREFIX}{self.tag}-br"
        self.host_link = f"gp{self.tag.replace('-', 'x')}"[:15]
        self._procs: list[subprocess.Popen[Any]] = []
        self._cut: dict[int, set[int]] = {i: set() for i in self.ids}
        self._made: list[str] = []
        self._closed = False
        try:
            self.subnet = _free_subnet()
            base = self.subnet.network_address
            self.ips = {i: str(base + i) for i in self.ids}
            self.host_ip = str(base + _HOST_OCTET)
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, node: int) -> str:
        """The namespace name of `node`."""
        if node not in self._cut:
            raise ValueError(f"no node {node} (nodes are {self.ids})")
        return f"{_PREFIX}{self.tag}-n{node}"

    def _build(self) -> None:
        br, plen = self.bridge_ns, self.subnet.prefixlen
        self._add_ns(br)
        _ip("-n", br, "link", "set", "lo", "up")
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        # The host side: created in the root namespace, its peer moved into the bridge's.
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", "host", "netns", br)
        self._made.append(self.host_link)
        _ip("-n", br, "link", "set", "host", "master", "br0", "up")
        _ip("addr", "add", f"{self.host_ip}/{plen}", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        for i in self.ids:
            ns = self.ns(i)
            self._add_ns(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            peer = ("peer", "name", "eth0", "netns", ns)
            _ip("-n", br, "link", "add", f"n{i}", "type", "veth", *peer)
            _ip("-n", br, "link", "set", f"n{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.ips[i]}/{plen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def run(self, node: int, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside `node`'s namespace (`ip netns exec`); `popen` goes to Popen.
        The process is SIGKILLed by `close()` if still running."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(node), *argv], **popen)
        self._procs.append(proc)
        return proc

    def partition(self, groups: Iterable[set[int]]) -> None:
        """Cut all traffic between nodes of different groups (replacing any earlier cut).
        Nodes named in no group form one more group together."""
        groups = [set(g) for g in groups]
        named = set().union(*groups) if groups else set()
        unknown = named - set(self.ids)
        if unknown:
            raise ValueError(f"partition names unknown nodes {sorted(unknown)}")
        if sum(len(g) for g in groups) != len(named):
            raise ValueError("partition groups must be disjoint")
        rest = set(self.ids) - named
        if rest:
            groups.append(rest)
        group_of = {i: n for n, g in enumerate(groups) for i in g}
        for i in self.ids:
            want = {j for j in self.ids if group_of[j] != group_of[i]}
            self._set_cut(i, want)

    def isolate(self, node: int) -> None:
        """Cut `node` off from every other node (it still reaches the host)."""
        self.partition([{node}])

    def heal(self) -> None:
        """Remove every cut."""
        for i in self.ids:
            self._set_cut(i, set())

    def cut(self, node: int) -> frozenset[int]:
        """The nodes `node` cannot reach now."""
        return frozenset(self._cut[node])

    def _set_cut(self, i: int, want: set[int]) -> None:
        ns = self.ns(i)
        for j in sorted(self._cut[i] - want):
            _ip("-n", ns, "route", "del", "blackhole", f"{self.ips[j]}/32")
        for j in sorted(want - self._cut[i]):
            _ip("-n", ns, "route", "replace", "blackhole", f"{self.ips[j]}/32")
        self._cut[i] = set(want)

    def close(self) -> None:
        """Kill the processes `run` started, delete the namespaces and the host veth."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
        for name in reversed(self._made):
            if name == self.host_link:
                _ip("link", "del", name, check=False)  # usually gone with its peer already
            else:
                _kill_namespace_processes(name)
                _ip("netns", "del", name, check=False)

    def __enter__(self) -> NetnsNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
