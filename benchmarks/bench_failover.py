"""What a failover to a streaming standby loses: results a primary acknowledged that its standby
never had, measured.

    .venv/bin/python benchmarks/bench_failover.py [--rounds 3] [--workers 4] [--seconds 2]
        [--synchronous] [--fsync]

Each round builds a primary and a standby of its own (``initdb``, ``pg_basebackup -R``, on free
ports; as the ``postgres`` user when run as root), the standby replicating asynchronously
(PostgreSQL's default) or, with ``--synchronous``, named in ``synchronous_standby_names``. Both
run with ``fsync=off`` unless ``--fsync``: the machine's disk is shared, and neither server is
restarted from its own files (the standby is promoted, the primary's files are thrown away).

The standby streams through a link of this script's own (a TCP relay, ``--link-ms`` of delay
each way, none by default). ``--workers`` processes run fresh effects as fast as they can on a URL
naming both hosts with ``target_session_attrs=read-write``, each call's tool appending one line
to an outbox file (the "provider"), each returned result written down with the moment it
returned. After ``--seconds`` the primary's machine dies: every process of the server is frozen
at once (SIGSTOP), the link is cut (connections reset, whatever was in flight dropped, as a
machine that loses power takes its network buffers with it), then the processes are killed; the
standby is promoted (``pg_ctl promote``) and the workers go on against it for as long again,
then stop. Then a fresh process repeats every call the workers made, in the same runs, as a
restarted job would, its tool writing to the same outbox.

Per round:

acknowledged      calls that returned a result to a worker
lost              of those, results the new primary does not hold: the row is missing (the
                  repeat runs the tool again: a second email) or still ``started`` (the repeat
                  reads it in doubt)
window            how long before the crash the oldest call whose result was lost began (its
                  result was acknowledged between then and the crash; on a busy machine a
                  worker may write the moment its result returned down milliseconds late, so
                  the call's start is the bound that holds)
lag               WAL bytes the standby had not yet written, just before the kill and the most
                  seen in the load before it (sampled every 20 ms), and the most ``write_lag``
                  PostgreSQL measured (from the primary's flush to the standby's write)
sent twice        outbox lines beyond one per call after the repeat (emails sent twice), of
                  which how many were of acknowledged calls
outage            the longest pause between two results (any worker) across the kill and the
                  promotion
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import queue
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG_BIN = Path("/usr/lib/postgresql")
TOOL = "send_email"


# -- a primary and its standby --------------------------------------------------------------------


def _bin(name: str) -> str:
    found = sorted(PG_BIN.glob(f"*/bin/{name}")) or [Path(p) for p in [shutil.which(name)] if p]
    if not found:
        sys.exit(f"bench_failover needs PostgreSQL's {name} (Debian: postgresql)")
    return str(found[-1])


def _as_owner(*command: str) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stdout}{done.stderr}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Link:
    """The network between the primary and the standby: a TCP relay from a port of its own to
    the primary, in threads of this process, holding each chunk ``delay`` seconds each way (a
    standby some distance away). ``cut`` is that network gone at once, as when the primary's
    machine loses power: every connection reset, whatever was still in flight dropped."""

    def __init__(self, upstream: int, delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._cut.is_set():
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                continue
            with self._lock:
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(a, chunks), daemon=True).start()
                threading.Thread(target=self._write, args=(b, chunks), daemon=True).start()

    def _read(self, source: socket.socket, chunks: queue.Queue[tuple[float, bytes]]) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                chunks.put((time.monotonic() + self.delay, data))
        chunks.put((0.0, b""))

    def _write(self, sink: socket.socket, chunks: queue.Queue[tuple[float, bytes]]) -> None:
        with contextlib.suppress(OSError):
            while (found := chunks.get())[1] and not self._cut.is_set():
                due, data = found
                time.sleep(max(0.0, due - time.monotonic()))
                if self._cut.is_set():
                    return  # in flight when the network went: never arrives
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            for s in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    # A reset, not a close: the kernel drops what it had not yet sent.
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()


def _server_processes(postmaster: int) -> list[int]:
    """A PostgreSQL server's processes: its postmaster and the postmaster's children (Linux
    /proc; each child leads a session of its own, so no process group holds them all)."""
    found = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:  # after the state: the parent's pid
                found.append(int(stat.parent.name))
    return found


@dataclass
class Cluster:
    root: Path
    primary: Path
    standby: Path
    ports: dict[Path, int]
    link: Link | None = None

    def url(self, data: Path) -> str:
        return f"postgresql+psycopg://c4a@127.0.0.1:{self.ports[data]}/postgres"

    @property
    def both(self) -> str:
        hosts = ",".join(f"127.0.0.1:{self.ports[d]}" for d in (self.primary, self.standby))
        return f"postgresql+psycopg://c4a@{hosts}/postgres?target_session_attrs=read-write"

    def pg_ctl(self, data: Path, *args: str) -> None:
        _run(_as_owner(_bin("pg_ctl"), "-D", str(data), *args), self.root)

    def crash_primary(self) -> float:
        """The primary's machine dies: every process of the server frozen (a backend forked
        meanwhile too), the network to the standby cut, then the processes killed (no
        checkpoint, no goodbye). Returns the moment the freezing began."""
        leader = int((self.primary / "postmaster.pid").read_text().split()[0])
        frozen: set[int] = set()
        members = set(_server_processes(leader))
        began = time.time()
        while members - frozen:
            for pid in members - frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= members
            members = set(_server_processes(leader))
        if self.link is not None:
            self.link.cut()
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return began


@contextlib.contextmanager
def cluster(*, synchronous: bool, fsync: bool, delay: float) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="c4a-bench-failover-"))
    primary, standby = root / "primary", root / "standby"
    found = Cluster(root, primary, standby, {primary: _free_port(), standby: _free_port()})
    started: list[Path] = []
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        initdb = _as_owner(_bin("initdb"), "-D", str(primary), "-U", "c4a", "--auth=trust")
        _run([*initdb, *([] if fsync else ["--no-sync"])], root)
        for data in (primary, standby):
            if data == standby:
                host = ["-h", "127.0.0.1", "-p", str(found.ports[primary]), "-U", "c4a"]
                _run(_as_owner(_bin("pg_basebackup"), *host, "-D", str(data), "-R", "-X", "stream"),
                     root)  # fmt: skip
                # The copy went direct; the stream goes through the link.
                found.link = Link(found.ports[primary], delay)
                auto = data / "postgresql.auto.conf"
                direct, linked = f"port={found.ports[primary]}", f"port={found.link.port}"
                auto.write_text(auto.read_text().replace(direct, linked))
            options = f"-p {found.ports[data]} -k {root} -c listen_addresses=127.0.0.1"
            options += "" if fsync else " -c fsync=off"
            if synchronous and data == primary:
                options += " -c synchronous_standby_names=*"
            found.pg_ctl(data, "-o", options, "-w", "-l", str(root / f"{data.name}.log"), "start")
            started.append(data)
        _until_streaming(found.url(primary))
        yield found
    finally:
        for data in reversed(started):
            with contextlib.suppress(RuntimeError):  # the primary is down already
                found.pg_ctl(data, "-m", "immediate", "stop")
        if found.link is not None:
            found.link.cut()
        shutil.rmtree(root, ignore_errors=True)


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _until_streaming(primary: str) -> None:
    import psycopg

    deadline = time.monotonic() + 120
    query = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
    while True:
        with psycopg.connect(_plain(primary), autocommit=True) as conn:
            row = conn.execute(query).fetchone()
        if row is not None and row[0] == 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the standby never streamed")
        time.sleep(0.1)


@dataclass(frozen=True)
class Lag:
    """How far the standby trails the primary: WAL bytes it has not written yet, and the time
    PostgreSQL measured between the primary's flush and the standby's write (``write_lag``)."""

    last_bytes: int  # just before the kill
    max_bytes: int  # over the load before it
    max_write_ms: float


def watch_lag(primary: str, seconds: float) -> Lag:
    """Sample the standby's lag every 20 ms for ``seconds``, then once more."""
    import psycopg

    query = (
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), write_lsn)::bigint, "
        "coalesce(extract(epoch from write_lag) * 1000, 0)::float8 FROM pg_stat_replication"
    )
    most, most_ms, last = 0, 0.0, 0
    with psycopg.connect(_plain(primary), autocommit=True, connect_timeout=5) as conn:
        deadline = time.monotonic() + seconds
        while True:
            row = conn.execute(query).fetchone()
            last, ms = (int(row[0]), float(row[1])) if row is not None else (-1, 0.0)
            most, most_ms = max(most, last), max(most_ms, ms)
            if time.monotonic() > deadline:
                return Lag(last, most, most_ms)
            time.sleep(0.02)


# -- the workers (this script, run as a child) ---------------------------------------------------


def worker(
    url: str, run_id: str, outbox: Path, acked: Path, stop: Path, repeat: Sequence[str]
) -> None:
    """Fresh effects until ``stop`` exists (or, repeating, each of ``repeat`` once); each call's
    outcome goes to ``acked`` as one JSON line, with the moment it returned."""
    import call4agents as c4a

    ledger = c4a.init(url, open_retry=60)

    @c4a.effect(name=TOOL)
    def send_email(to: str) -> dict[str, Any]:
        with outbox.open("a") as f:
            f.write(json.dumps({"to": to, "pid": os.getpid()}) + "\n")
        return {"to": to, "pid": os.getpid()}

    keys: Iterator[str] = iter(repeat) if repeat else (f"{run_id}-{i}" for i in range(10**9))
    with c4a.run(run_id), acked.open("a") as out:
        for to in keys:
            if not repeat and stop.exists():
                break
            began = time.time()
            try:
                line = {"to": to, "result": send_email(to)}
            except c4a.Call4AgentsError as exc:
                line = {"to": to, "error": type(exc).__name__}
            out.write(json.dumps({**line, "began": began, "at": time.time()}) + "\n")
            out.flush()
    ledger.close()


def _spawn(
    url: str, run_id: str, folder: Path, *repeat: str, name: str = ""
) -> subprocess.Popen[bytes]:
    files = [str(folder / "outbox.jsonl"), str(folder / f"acked-{name or run_id}.jsonl"),
             str(folder / "stop")]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", url, run_id, *files, *repeat],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _until_busy(files: Sequence[Path], workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """Until every worker has returned a few results (starting a process takes a while)."""
    deadline = time.monotonic() + 120
    while not all(f.exists() and len(f.read_bytes().splitlines()) >= 10 for f in files):
        if any(w.poll() is not None for w in workers) or time.monotonic() > deadline:
            raise RuntimeError("the workers never got going")
        time.sleep(0.05)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# -- one round ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    acknowledged: int
    lost_missing: int  # acknowledged, no row on the new primary: the repeat ran the tool again
    lost_in_doubt: int  # acknowledged, the row still started: the repeat read it in doubt
    window_ms: float  # the lost results' calls began at most this long before the crash
    lag: Lag
    sent_twice: int  # outbox lines beyond one per call
    sent_twice_acked: int  # of which of calls a worker had been given a result for
    outage_s: float  # the longest pause between two results, across the kill and promotion
    rate: float  # acknowledged results per second before the kill


def one_round(args: argparse.Namespace) -> Round:
    with cluster(synchronous=args.synchronous, fsync=args.fsync, delay=args.link_ms / 1000) as c:
        import call4agents as c4a

        c4a.Ledger(c.url(c.primary)).close()  # the tables, made once
        folder = c.root / "work"
        folder.mkdir()
        runs = [f"w{i}" for i in range(args.workers)]
        workers = [_spawn(c.both, run, folder) for run in runs]
        _until_busy([folder / f"acked-{run}.jsonl" for run in runs], workers)
        lag = watch_lag(c.url(c.primary), args.seconds)
        killed = c.crash_primary()
        c.pg_ctl(c.standby, "-w", "promote")
        time.sleep(args.seconds)
        (folder / "stop").touch()
        for w in workers:
            _, err = w.communicate(timeout=300)
            if w.returncode != 0:
                raise RuntimeError(f"a worker failed: {err.decode()[-2000:]}")
        made = {run: _lines(folder / f"acked-{run}.jsonl") for run in runs}
        repeats = [
            _spawn(
                c.url(c.standby), run, folder, *(x["to"] for x in made[run]), name=f"{run}-again"
            )
            for run in runs
        ]
        for w in repeats:
            _, err = w.communicate(timeout=300)
            if w.returncode != 0:
                raise RuntimeError(f"a repeat failed: {err.decode()[-2000:]}")
        again = {run: _lines(folder / f"acked-{run}-again.jsonl") for run in runs}
        return _judge(made, again, _lines(folder / "outbox.jsonl"), killed, lag, args.seconds)


def _judge(
    made: dict[str, list[dict[str, Any]]],
    again: dict[str, list[dict[str, Any]]],
    outbox: list[dict[str, Any]],
    killed: float,
    lag: Lag,
    seconds: float,
) -> Round:
    acked = {x["to"]: x for lines in made.values() for x in lines if "result" in x}
    repeated = {x["to"]: x for lines in again.values() for x in lines}
    # A result the new primary kept comes back unchanged; one it lost is run again (a new
    # result) or, if only the intent had reached the standby, read in doubt.
    lost = [to for to, x in acked.items() if repeated[to].get("result") != x["result"]]
    in_doubt = [to for to in lost if repeated[to].get("error") == "EffectInDoubt"]
    counts: dict[str, int] = {}
    for line in outbox:
        counts[line["to"]] = counts.get(line["to"], 0) + 1
    twice = {to: n - 1 for to, n in counts.items() if n > 1}
    times = sorted(x["at"] for x in acked.values() if x["at"] > killed - 1.0)
    before = [x for x in acked.values() if x["at"] <= killed]
    return Round(
        acknowledged=len(acked),
        lost_missing=len(lost) - len(in_doubt),
        lost_in_doubt=len(in_doubt),
        window_ms=max(((killed - acked[to]["began"]) * 1000 for to in lost), default=0.0),
        lag=lag,
        sent_twice=sum(twice.values()),
        sent_twice_acked=sum(n for to, n in twice.items() if to in acked),
        outage_s=max((b - a for a, b in itertools.pairwise(times)), default=float("nan")),
        rate=len(before) / seconds,
    )


# -- main -----------------------------------------------------------------------------------------


def header(args: argparse.Namespace) -> None:
    import call4agents as c4a

    version = subprocess.run([_bin("postgres"), "--version"], capture_output=True, text=True)
    print(f"command: python {shlex.join(sys.argv)}")
    print(
        f"python {platform.python_version()}, call4agents {c4a.__version__}, "
        f"{version.stdout.strip()}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    mode = "synchronous" if args.synchronous else "asynchronous"
    print(
        f"{mode} replication, fsync={'on' if args.fsync else 'off'}, link {args.link_ms:g} ms "
        f"each way; {args.workers} workers, the primary's machine dies after {args.seconds:g} s\n"
    )


def print_rounds(rounds: Sequence[Round]) -> None:
    head = (
        f"{'round':>5} {'acked':>7} {'per s':>7} {'lost':>5} {'missing':>8} {'in doubt':>9} "
        f"{'window ms':>10} {'lag bytes (last/max)':>21} {'write_lag ms':>13} {'sent twice':>11} "
        f"{'of acked':>9} {'outage s':>9}"
    )
    print(head)
    print("-" * len(head))
    for i, r in enumerate(rounds, 1):
        lost = r.lost_missing + r.lost_in_doubt
        print(
            f"{i:>5} {r.acknowledged:>7} {r.rate:>7.0f} {lost:>5} {r.lost_missing:>8} "
            f"{r.lost_in_doubt:>9} {r.window_ms:>10.1f} "
            f"{f'{r.lag.last_bytes} / {r.lag.max_bytes}':>21} {r.lag.max_write_ms:>13.1f} "
            f"{r.sent_twice:>11} {r.sent_twice_acked:>9} {r.outage_s:>9.2f}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0, help="load before and after the kill")
    parser.add_argument("--synchronous", action="store_true", help="a synchronous standby")
    parser.add_argument("--fsync", action="store_true", help="both servers with fsync=on")
    parser.add_argument(
        "--link-ms", type=float, default=0.0, help="one-way delay between primary and standby"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    if (argv or sys.argv[1:])[:1] == ["--worker"]:
        url, run_id, outbox, acked, stop, *repeat = (argv or sys.argv[1:])[1:]
        worker(url, run_id, Path(outbox), Path(acked), Path(stop), repeat)
        return
    args = parse_args(argv)
    header(args)
    print_rounds([one_round(args) for _ in range(args.rounds)])


if __name__ == "__main__":
    main()
