"""`run`'s launcher never hangs in a process with other threads (the full suite's hang).

The launcher is a raw clone3 of the calling process when that process has one thread. The
syscall returns into the bytecode interpreter, in the child too, before CPython's after-fork
bookkeeping: a GIL drop request another thread set while waiting for the GIL made the child
drop the GIL and wait for that thread, which does not exist in the child (futex, forever, before
it closed its descriptors: the run's cgroup directory and terminal held, load 0). The suite
forced the clone in pytest-xdist workers, whose execnet I/O thread wakes for every message.

The stress here is a process of its own (only there does the test control every thread): it
forces the clone the way the suite did, keeps threads contending for the GIL alive for three
runs in four (the clone is refused there: a fresh interpreter is spawned) and none for the
fourth (the clone runs), all bounded by one deadline. On the old code it hangs within a few runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, make_project
from tests.harness.deadline import scaled
from tests.support.project import manifest

MANIFEST = str(manifest("threads", "claude-code").sandbox(write_dirs=["."]))
RUNS = 120
STALL = 15.0  # seconds without a finished run (idle machine): hung

STRESS = textwrap.dedent("""
    import json, os, subprocess, sys, threading, time, zlib
    from pathlib import Path
    from agentstack.manifest.load import load_manifest
    from agentstack.sandbox import runner
    from agentstack.sandbox.resolve import resolve_policy
    root, runs = Path(sys.argv[1]), int(sys.argv[2])
    policy = resolve_policy(load_manifest(root).sandbox, root)
    runner._single_threaded = lambda: True  # what the suite did in its xdist workers
    stop = threading.Event()
    blob = os.urandom(1 << 20)
    def contend():  # drops the GIL and takes it back all the time: it keeps asking for it
        while not stop.is_set():
            zlib.compress(blob, 1)
    null = os.open(os.devnull, os.O_RDWR)
    def one(i, out):
        streams = null if i // 4 % 2 else subprocess.DEVNULL  # either clone: plain fds, or Popen's
        with runner.confined(root, policy, ["/bin/true"], {"PATH": "/usr/bin:/bin"},
                             interactive=False, stdin=streams, stdout=streams,
                             stderr=streams) as child:
            out.append(child.process.wait())
        out.append(type(child.process).__name__)
    for i in range(runs):
        out = []
        if i % 4 == 0:  # alone: this thread is the only one
            until = time.monotonic() + 30  # a joined thread may take a moment to leave
            while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < until:
                time.sleep(0.001)
            one(i, out)
            threads = 0
        else:  # from a thread of its own, beside three asking for the GIL all the time
            stop.clear()
            contenders = [threading.Thread(target=contend, daemon=True) for _ in range(3)]
            for t in contenders:
                t.start()
            runner_thread = threading.Thread(target=one, args=(i, out), daemon=True)
            runner_thread.start()
            runner_thread.join()
            stop.set()
            for t in contenders:
                t.join()
            threads = 4
        print(json.dumps({"run": i, "threads": threads, "code": out[0], "kind": out[1]}),
              flush=True)
""")


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return "?"


@pytest.mark.slow
def test_confined_runs_with_threads_alive_never_hang(tmp_path: Path) -> None:
    base = Path("/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home()))
    root = make_project(base / f"agentstack-test-threads-{os.getpid()}" / "demo", MANIFEST)
    env = dict(os.environ, PYTHONPATH=str(REPO), AGENTSTACK_HOME=str(tmp_path / "state"))
    stress = subprocess.Popen(  # a session of its own: a hung launcher is killed with it
        [sys.executable, "-c", STRESS, str(root), str(RUNS)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert stress.stdout is not None
    lines: list[dict[str, object]] = []
    deadline = time.monotonic() + scaled(STALL)
    buffer = b""
    try:
        while len(lines) < RUNS and time.monotonic() < deadline:
            ready, _, _ = select.select([stress.stdout], [], [], 0.5)
            if not ready:
                if stress.poll() is not None:
                    break
                continue
            chunk = os.read(stress.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            lines += [json.loads(line) for line in done if line]
            if done:
                deadline = time.monotonic() + scaled(STALL)  # a run takes well under a second
        hung = stress.poll() is None and len(lines) < RUNS
        if not hung:
            with contextlib.suppress(subprocess.TimeoutExpired):
                stress.wait(timeout=max(1.0, deadline - time.monotonic()))
            hung = stress.poll() is None
        stuck = {}
        if hung:
            tasks = Path(f"/proc/{stress.pid}/task")
            stuck = {int(pid): _wchan(int(pid)) for task in tasks.iterdir()
                     for pid in (task / "children").read_text().split()}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stress.pid, signal.SIGKILL)
        _, err = stress.communicate()
        import shutil

        shutil.rmtree(root.parent, ignore_errors=True)
    assert not hung, (f"hung after {len(lines)} of {RUNS} runs; the launcher(s) wait in "
                      f"{stuck} (the clone serviced another thread's GIL request)")
    assert stress.returncode == 0, err.decode(errors="replace")[-2000:]
    assert [line["code"] for line in lines] == [0] * RUNS
    kinds = {(line["threads"] > 0, line["kind"]) for line in lines}  # type: ignore[operator]
    # with other threads alive: a fresh interpreter, whatever _single_threaded said; alone: a clone
    assert kinds == {(True, "Popen"), (False, "_ClonedProcess"), (False, "_Clone")}, kinds


DENIALS = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from agentstack.manifest.load import load_manifest
    from agentstack.sandbox import runner
    from agentstack.sandbox.resolve import resolve_policy
    root, decoy, outside = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    policy = resolve_policy(load_manifest(root).sandbox, root)
    results = {}
    for name, script in (("read", f"cat {decoy}"), ("write", f"echo planted > {outside}")):
        with runner.confined(root, policy, ["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"},
                             interactive=False, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) as child:
            out, _ = child.process.communicate()
        results[name] = {"code": child.process.returncode, "out": out.decode(),
                         "kind": type(child.process).__name__}
    print(json.dumps(results))
""")


def test_the_cloned_launcher_confines_like_the_spawned_one(tmp_path: Path) -> None:
    """From a process with one thread (what `agentstack run` is), the launcher is the clone, and
    the kernel refuses a read of a decoy key outside /tmp and a write outside the project with
    EACCES (the confinement suite proves every row under the spawned launcher)."""
    base = Path("/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home()))
    top = base / f"agentstack-test-clone-deny-{os.getpid()}"
    root = make_project(top / "demo", MANIFEST)
    decoy = top / "home" / ".ssh" / "id_ed25519"
    decoy.parent.mkdir(parents=True)
    decoy.write_text("DECOY-PRIVATE-KEY\n")
    outside = top / "outside.txt"
    env = dict(os.environ, PYTHONPATH=str(REPO), AGENTSTACK_HOME=str(tmp_path / "state"))
    try:
        done = subprocess.run([sys.executable, "-c", DENIALS, str(root), str(decoy), str(outside)],
                              capture_output=True, text=True, env=env, timeout=scaled(120),
                              start_new_session=True)
        assert done.returncode == 0, done.stderr[-2000:]
        results = json.loads(done.stdout)
        for name in ("read", "write"):
            result = results[name]
            assert result["kind"] == "_Clone", result
            assert result["code"] != 0 and "Permission denied" in result["out"], result
        assert "DECOY" not in results["read"]["out"]
        assert not outside.exists()
    finally:
        import shutil

        shutil.rmtree(top, ignore_errors=True)
