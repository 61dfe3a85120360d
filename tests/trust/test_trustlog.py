"""The trust log: semantics, concurrency, crash safety and tamper evidence."""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack.canonical import b3
from agentstack.errors import EXIT_REFUSED, Refused
from agentstack.trust.record import (
    ACTIONS,
    GENESIS,
    MAX_LINE_BYTES,
    TrustLogTampered,
    TrustRecordInvalid,
)
from agentstack.trust.store import TrustLog
from tests.harness.deadline import scaled
from tests.support.cli import REPO

PROJECT = "/work/projects/alpha"
OTHER = "/work/projects/beta"
FIXED_NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def digest(n: int | str) -> str:
    return b3(f"consent-{n}".encode())


def lines_of(log: TrustLog) -> list[bytes]:
    data = log.path.read_bytes()
    assert data.endswith(b"\n")
    return [line + b"\n" for line in data[:-1].split(b"\n")]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def log(tmp_path: Path) -> TrustLog:
    return TrustLog(tmp_path / "home", clock=lambda: FIXED_NOW)


# ------------------------------------------------------------------------------------ semantics


def test_append_read_and_state(log: TrustLog) -> None:
    first = log.append("trust", PROJECT, digest(1), lock=digest("lock"), extra={"note": "first"})
    log.append("trust", PROJECT, digest(2))
    log.append("revoke", PROJECT, digest(1))

    records = log.records()
    assert [r.seq for r in records] == [0, 1, 2]
    assert [r.action for r in records] == ["trust", "trust", "revoke"]
    assert records[0] == first
    assert first.v == 1 and first.time == "2027-01-15T08:00:00Z" and first.prev == GENESIS
    assert first.lock == digest("lock") and first.extra == {"note": "first"}
    assert first.to_json()["extra"] == {"note": "first"}
    assert "extra" not in records[1].to_json()

    assert log.state_for(PROJECT, digest(1)) == "revoked"
    assert log.state_for(PROJECT, digest(2)) == "trusted"
    assert log.state_for(PROJECT, digest(3)) == "unknown"
    assert log.trusted_digests(PROJECT) == [digest(2)]
    last = log.last_trusted(PROJECT)
    assert last is not None and last.digest == digest(2)
    assert log.head() == (3, b3(lines_of(log)[-1]))


def test_trust_binds_the_pair_not_the_digest(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1))
    assert log.state_for(PROJECT, digest(1)) == "trusted"
    assert log.state_for(OTHER, digest(1)) == "unknown"
    assert log.state_for(PROJECT + "/sub", digest(1)) == "unknown"
    assert log.trusted_digests(OTHER) == []
    assert log.last_trusted(OTHER) is None
    log.append("revoke", OTHER, digest(1))
    assert log.state_for(PROJECT, digest(1)) == "trusted"
    assert log.state_for(OTHER, digest(1)) == "revoked"


def test_retrust_after_revoke_and_order_of_trust(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest("a"))
    log.append("trust", PROJECT, digest("b"))
    log.append("revoke", PROJECT, digest("a"))
    log.append("trust", PROJECT, digest("a"))
    assert log.state_for(PROJECT, digest("a")) == "trusted"
    assert log.trusted_digests(PROJECT) == [digest("b"), digest("a")]
    last = log.last_trusted(PROJECT)
    assert last is not None and (last.digest, last.seq) == (digest("a"), 3)


def test_release_receive_and_discard_trust_nothing(log: TrustLog) -> None:
    # A release records a copy into a project; only an explicit "trust" record trusts it.
    log.append("release", PROJECT, digest(1), extra={"bundle": digest("bundle")})
    log.append("discard", "", digest(2))
    log.append("receive", "", digest(3), extra={"name": "team", "version": "2"})
    assert log.state_for(PROJECT, digest(1)) == "unknown"
    assert log.state_for("", digest(2)) == "unknown"
    assert log.state_for(PROJECT, digest(3)) == "unknown"
    assert log.trusted_digests(PROJECT) == []
    log.append("trust", PROJECT, digest(1))
    log.append("release", PROJECT, digest(1))
    assert log.state_for(PROJECT, digest(1)) == "trusted"
    assert log.state_for(OTHER, digest(1)) == "unknown"
    assert log.trusted_digests(PROJECT) == [digest(1)]


def test_empty_log_reads_without_creating_anything(tmp_path: Path) -> None:
    log = TrustLog(tmp_path / "home")
    assert log.records() == []
    assert log.head() == (0, GENESIS)
    assert log.state_for(PROJECT, digest(1)) == "unknown"
    report = log.verify()
    assert report.ok and report.count == 0 and report.head == GENESIS
    assert not (tmp_path / "home").exists()


def test_files_are_private(tmp_path: Path) -> None:
    home = tmp_path / "deep" / "home"
    log = TrustLog(home)
    log.append("trust", PROJECT, digest(1))
    assert home.stat().st_mode & 0o777 == 0o700
    for name in ("trust.jsonl", "trust.head", "trust.lock"):
        assert (home / name).stat().st_mode & 0o777 == 0o600, name
    assert sorted(p.name for p in home.iterdir()) == ["trust.head", "trust.jsonl", "trust.lock"]
    assert json.loads((home / "trust.head").read_bytes()) == {
        "v": 1,
        "count": 1,
        "head": b3((home / "trust.jsonl").read_bytes()),
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action": "approve"}, "action"),
        ({"digest": "b3:" + "0" * 63}, "digest"),
        ({"digest": "sha256:" + "0" * 64}, "digest"),
        ({"project": "relative/path"}, "absolute"),
        ({"project": "/a/../b"}, "normalised"),
        ({"project": "/a//b"}, "normalised"),
        ({"project": ""}, "project is empty"),
        ({"project": "/bad\udcffname"}, "UTF-8"),
        ({"lock": "has space"}, "lock"),
        ({"extra": {"note": 1}}, "extra"),
        ({"extra": {"bad key": "x"}}, "extra"),
        ({"extra": {"note": "x" * MAX_LINE_BYTES}}, "bytes"),
    ],
)
def test_append_refuses_invalid_records(
    log: TrustLog, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"action": "trust", "project": PROJECT, "digest": digest(1)}
    args.update(kwargs)
    with pytest.raises(TrustRecordInvalid, match=message) as info:
        log.append(**args)  # type: ignore[arg-type]
    assert isinstance(info.value, Refused) and info.value.exit_code == EXIT_REFUSED
    assert not log.home.exists()


def test_a_line_just_under_the_bound_is_accepted(log: TrustLog) -> None:
    base = len(json.dumps(log.append("trust", PROJECT, digest(0)).to_json()))
    note = "x" * (MAX_LINE_BYTES - base - 64)
    record = log.append("trust", PROJECT, digest(1), extra={"note": note})
    assert len(lines_of(log)[-1]) <= MAX_LINE_BYTES
    assert log.records()[-1] == record


def test_prev_is_blake3_of_the_exact_bytes_on_disk(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1), extra={"note": "snowman \u2603 and \u2028 separator"})
    log.append("revoke", PROJECT, digest(1))
    log.append("trust", OTHER, digest(2), lock=digest("lock"))
    raw = log.path.read_bytes()
    lines = raw.splitlines(keepends=True)
    assert len(lines) == 3 and all(line.endswith(b"\n") for line in lines)
    expected_prev = "b3:" + blake3.blake3(b"agentstack-trust-genesis").hexdigest()
    for line in lines:
        assert json.loads(line)["prev"] == expected_prev
        expected_prev = "b3:" + blake3.blake3(line).hexdigest()
    head = json.loads((log.home / "trust.head").read_bytes())
    assert head == {"v": 1, "count": 3, "head": expected_prev}
    # Canonical form: sorted keys, no spaces, raw UTF-8.
    first = json.loads(lines[0])
    assert (
        lines[0]
        == json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        + b"\n"
    )


_OPS = st.lists(
    st.tuples(
        st.sampled_from(ACTIONS),
        st.sampled_from([PROJECT, OTHER]),
        st.sampled_from([digest(i) for i in range(3)]),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_state_matches_a_simple_model(ops: list[tuple[str, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = TrustLog(Path(tmp) / "home")
        model: dict[tuple[str, str], tuple[str, int]] = {}
        for seq, (action, project, dig) in enumerate(ops):
            log.append(action, project, dig)  # type: ignore[arg-type]
            if action == "trust":
                model[(project, dig)] = ("trusted", seq)
            elif action == "revoke":
                model[(project, dig)] = ("revoked", seq)
        assert log.verify().ok
        for project in (PROJECT, OTHER):
            for dig in (digest(i) for i in range(3)):
                assert log.state_for(project, dig) == model.get((project, dig), ("unknown", 0))[0]
            trusted = sorted(
                (seq, dig)
                for (p, dig), (s, seq) in model.items()
                if p == project and s == "trusted"
            )
            assert log.trusted_digests(project) == [dig for _, dig in trusted]


def test_trustlog_imports_nothing_heavy() -> None:
    code = (
        "import sys, agentstack.trust.store;"
        "heavy = {'pydantic', 'typer', 'rich', 'tomlkit', 'git', 'nacl', 'tempfile', 'shutil'};"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=subprocess_env(),
    ).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------- concurrency

_WRITER = r"""
import sys, time
from pathlib import Path
from agentstack.canonical import b3
from agentstack.trust.store import TrustLog
home, worker, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
log = TrustLog(home)
go = home.parent / "go"
while not go.exists():
    time.sleep(0.001)
for i in range(count):
    action = "revoke" if i % 3 == 2 else "trust"
    digest = b3(f"{worker}:{i % 5}".encode())
    log.append(action, f"/proj/{worker}", digest, extra={"id": f"{worker}-{i}"})
"""

_READER = r"""
import sys, time
from pathlib import Path
from agentstack.trust.store import TrustLog
home = Path(sys.argv[1])
log = TrustLog(home)
checks = 0
while not (home.parent / "done").exists():
    report = log.verify()
    if not report.ok:
        print("FAIL", report)
        sys.exit(1)
    checks += 1
    time.sleep(0.2)  # a full verify costs CPU the writers need
print("checks", checks)
"""


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    workers, per_worker = 8, 500
    home = tmp_path / "home"
    env = subprocess_env()
    started = time.monotonic()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(home), str(w), str(per_worker)], env=env
        )
        for w in range(workers)
    ]
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(home)], env=env, stdout=subprocess.PIPE, text=True
    )
    (tmp_path / "go").touch()
    for proc in writers:
        assert proc.wait(timeout=scaled(300)) == 0
    (tmp_path / "done").touch()
    reader_out, _ = reader.communicate(timeout=scaled(60))
    elapsed = time.monotonic() - started
    print(f"{workers}x{per_worker} appends in {elapsed:.1f}s; reader: {reader_out.strip()}")
    assert reader.returncode == 0, reader_out

    log = TrustLog(home)
    records = log.records()
    ids = [r.extra["id"] for r in records]
    assert len(ids) == len(set(ids)) == workers * per_worker
    assert set(ids) == {f"{w}-{i}" for w in range(workers) for i in range(per_worker)}
    assert [r.seq for r in records] == list(range(workers * per_worker))
    # Each writer's own appends keep their order.
    for w in range(workers):
        mine = [int(r.extra["id"].split("-")[1]) for r in records if r.project == f"/proj/{w}"]
        assert mine == list(range(per_worker))
    report = log.verify()
    assert report.ok and report.count == workers * per_worker and report.pending == 0
    assert log.head() == (workers * per_worker, report.head)
    assert log.state_for("/proj/0", b3(b"0:2")) == "revoked"  # i=497 (revoke) is its last record
    assert log.state_for("/proj/0", b3(b"0:4")) == "trusted"


def test_writers_exclude_each_other_and_readers_never_wait(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1))
    fd = os.open(log.home / "trust.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        results: list[object] = []
        reader = threading.Thread(target=lambda: results.append(log.state_for(PROJECT, digest(1))))
        reader.start()
        reader.join(timeout=scaled(10))
        assert results == ["trusted"], "a reader waited for the writer lock"
        writer = threading.Thread(
            target=lambda: results.append(log.append("trust", PROJECT, digest(2)))
        )
        writer.start()
        writer.join(timeout=0.3)
        assert writer.is_alive(), "append did not wait for the lock"
    finally:
        os.close(fd)
    writer.join(timeout=scaled(10))
    assert not writer.is_alive()
    assert log.trusted_digests(PROJECT) == [digest(1), digest(2)]


def test_reader_rechecks_under_the_lock_when_writers_moved_on(
    log: TrustLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentstack.trust.store as trustlog

    heads = []
    for i in range(6):
        log.append("trust", PROJECT, digest(i))
        heads.append(trustlog._read_head_file(log.home / "trust.head"))
    real = trustlog._read_head_file
    calls = []

    def stale_once(path: Path) -> object:
        # As if two appends landed between this reader's read of the head and of the log.
        calls.append(path)
        return heads[3] if len(calls) == 1 else real(path)

    monkeypatch.setattr(trustlog, "_read_head_file", stale_once)
    report = log.verify()
    assert report.ok and report.count == 6
    assert len(calls) == 2


# ---------------------------------------------------------------------------------- crash safety

_CRASH_WRITER = r"""
import sys
from pathlib import Path
from agentstack.canonical import b3
from agentstack.trust.store import TrustLog
home, trial = Path(sys.argv[1]), sys.argv[2]
log = TrustLog(home)
print("ready", flush=True)
i = 0
while True:
    extra = {"trial": trial, "i": str(i)}
    if i % 3 == 2:  # long lines span many pages, so a kill can land inside the write
        extra["pad"] = "x" * (20000 + (i * 7919) % 40000)
    record = log.append("revoke" if i % 4 == 3 else "trust", "/proj/crash", b3(f"{trial}:{i}".encode()), extra=extra)
    print(record.seq, i, flush=True)
    i += 1
"""


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_record(tmp_path: Path) -> None:
    trials, homes = 60, 6
    rng = random.Random(20261129)
    env = subprocess_env()
    seen = {"torn": 0, "pending": 0, "acked": 0}
    started = time.monotonic()
    for trial in range(trials):
        home = tmp_path / f"home{trial % homes}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _CRASH_WRITER, str(home), str(trial)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=scaled(30))
        assert proc.returncode == -signal.SIGKILL
        acked = [tuple(map(int, line.split())) for line in out.split("\n")[:-1]]
        seen["acked"] += len(acked)

        log = TrustLog(home)
        before = log.verify()
        assert before.ok, before.problem  # a crash is never mistaken for tampering
        seen["torn"] += before.torn > 0
        seen["pending"] += before.pending

        log.append("trust", "/proj/crash", digest(trial), extra={"trial": str(trial), "i": "after"})
        after = log.verify()
        assert after.ok and after.torn == 0 and after.pending == 0, after
        records = log.records()
        for seq, i in acked:
            assert records[seq].extra["trial"] == str(trial)
            assert records[seq].extra["i"] == str(i)
    print(f"{trials} kills in {time.monotonic() - started:.1f}s: {seen}")
    assert seen["acked"] > 0


def test_torn_tail_is_ignored_then_moved_aside(log: TrustLog) -> None:
    for i in range(3):
        log.append("trust", PROJECT, digest(i))
    complete = log.path.read_bytes()
    torn = b'{"action":"revoke","digest":"b3:0123'
    with open(log.path, "ab") as handle:
        handle.write(torn)

    assert len(log.records()) == 3
    report = log.verify()
    assert report.ok and report.torn == len(torn) and report.count == 3
    assert log.state_for(PROJECT, digest(0)) == "trusted"

    record = log.append("revoke", PROJECT, digest(0))
    assert record.seq == 3 and record.prev == b3(complete.splitlines(keepends=True)[-1])
    assert log.path.read_bytes().startswith(complete)
    assert torn not in log.path.read_bytes()
    assert (log.home / "trust.jsonl.torn").read_bytes() == torn + b"\n"
    assert log.verify().ok and log.verify().torn == 0
    assert log.state_for(PROJECT, digest(0)) == "revoked"


def test_repair_torn_tail_keeps_every_fragment(log: TrustLog) -> None:
    assert log.repair_torn_tail() == 0  # no log yet
    log.append("trust", PROJECT, digest(1))
    assert log.repair_torn_tail() == 0
    for fragment in (b'{"acti', b'{"action":"trust","dig'):
        with open(log.path, "ab") as handle:
            handle.write(fragment)
        assert log.repair_torn_tail() == len(fragment)
    assert (log.home / "trust.jsonl.torn").read_bytes() == b'{"acti\n{"action":"trust","dig\n'
    assert log.path.read_bytes().endswith(b"\n")
    assert log.verify().ok and len(log.records()) == 1


def test_an_oversized_unterminated_tail_is_not_a_torn_write(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1))
    with open(log.path, "ab") as handle:
        handle.write(b"x" * (MAX_LINE_BYTES + 1))
    report = log.verify()
    assert not report.ok and report.first_bad == 2 and "longer than" in report.problem
    before = log.path.read_bytes()
    with pytest.raises(TrustLogTampered):
        log.append("trust", PROJECT, digest(2))
    assert log.path.read_bytes() == before


def test_writer_killed_between_line_and_head_is_adopted(
    log: TrustLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentstack.trust.store as trustlog

    log.append("trust", PROJECT, digest(1))
    log.append("trust", PROJECT, digest(2))
    head_before = (log.home / "trust.head").read_bytes()

    class Killed(BaseException):
        """A kill, not an error: nothing of the writer runs after it (an OSError is rolled back)."""

    def crash(*args: object) -> None:
        raise Killed("simulated crash before the head is replaced")

    monkeypatch.setattr(trustlog.os, "replace", crash)
    with pytest.raises(Killed, match="simulated"):
        log.append("revoke", PROJECT, digest(1))
    monkeypatch.undo()
    assert (log.home / "trust.head").read_bytes() == head_before
    assert not [p for p in log.home.iterdir() if p.name.startswith(".trust.head.")]

    # The line is durable, so readers count it, and the next writer adopts it.
    report = TrustLog(log.home).verify()
    assert report.ok and report.pending == 1 and report.count == 3
    assert TrustLog(log.home).state_for(PROJECT, digest(1)) == "revoked"
    record = TrustLog(log.home).append("trust", PROJECT, digest(3))
    assert record.seq == 3
    report = log.verify()
    assert report.ok and report.pending == 0 and log.head() == (4, report.head)


def test_stale_head_temp_files_are_removed(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1))
    stale = log.home / ".trust.head.0123456789abcdef.tmp"
    stale.write_text("{}")
    log.append("trust", PROJECT, digest(2))
    assert not stale.exists()


# ---------------------------------------------------------------------------------- tampering

Tamper = Callable[[TrustLog, list[bytes], list[bytes]], None]


def _write_lines(log: TrustLog, lines: list[bytes]) -> None:
    log.path.write_bytes(b"".join(lines))


def _edit_line(index: int, edit: Callable[[bytes], bytes]) -> Tamper:
    def tamper(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
        lines[index] = edit(lines[index])
        _write_lines(log, lines)

    return tamper


def _flip_digest_char(line: bytes) -> bytes:
    at = line.index(b'"digest":"b3:') + len(b'"digest":"b3:')
    return line[:at] + (b"1" if line[at : at + 1] != b"1" else b"2") + line[at + 1 :]


def _delete(index: int) -> Tamper:
    def tamper(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
        del lines[index]
        _write_lines(log, lines)

    return tamper


def _swap(i: int, j: int) -> Tamper:
    def tamper(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
        lines[i], lines[j] = lines[j], lines[i]
        _write_lines(log, lines)

    return tamper


def _forge_chain(lines: list[bytes], at: int) -> list[bytes]:
    """What a careful attacker writes: a forged trust record at `at`, then every later line
    renumbered and re-chained so that every prev matches."""
    docs = [json.loads(line) for line in lines]
    forged = dict(docs[at], action="trust", digest=digest("evil"), project=PROJECT)
    docs.insert(at, forged)
    out: list[bytes] = []
    prev = GENESIS
    for seq, doc in enumerate(docs):
        doc = dict(doc, seq=seq, prev=prev)
        line = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        out.append(line + b"\n")
        prev = b3(out[-1])
    return out


def _insert_forged(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
    _write_lines(log, _forge_chain(lines, 2))


def _truncate(n: int) -> Tamper:
    def tamper(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
        _write_lines(log, lines[: len(lines) - n])

    return tamper


def _remove_log(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
    log.path.unlink()


def _set_head(content: bytes | Callable[[list[bytes]], bytes] | None) -> Tamper:
    def tamper(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
        path = log.home / "trust.head"
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content(heads) if callable(content) else content)

    return tamper


def _head_doc(count: int, head: str) -> bytes:
    return json.dumps({"v": 1, "count": count, "head": head}).encode()


def _append_unchained(log: TrustLog, lines: list[bytes], heads: list[bytes]) -> None:
    doc = dict(json.loads(lines[-1]), seq=6, digest=digest("evil"))
    line = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    _write_lines(log, [*lines, line])


def _respace(line: bytes) -> bytes:
    return json.dumps(json.loads(line), sort_keys=True).encode() + b"\n"


TAMPERS: dict[str, tuple[Tamper, int | None, str]] = {
    "edit a byte (still valid JSON)": (_edit_line(2, _flip_digest_char), 4, "prev does not match"),
    "edit a byte (breaks JSON)": (_edit_line(2, lambda line: b"X" + line[1:]), 3, "not valid JSON"),
    "edit the last record": (_edit_line(5, _flip_digest_char), 6, "does not match trust.head"),
    "line is not an object": (_edit_line(2, lambda line: b"[1,2,3]\n"), 3, "not a JSON object"),
    "line too long": (_edit_line(2, lambda line: b" " * MAX_LINE_BYTES + line), 3, "longer than"),
    "not canonical": (_edit_line(2, _respace), 3, "canonical"),
    "unknown field": (
        _edit_line(2, lambda line: line.replace(b'"v":1}', b'"v":1,"w":1}')),
        3,
        "unknown fields",
    ),
    "delete a middle line": (_delete(2), 3, "has seq 3"),
    "delete the first line": (_delete(0), 1, "has seq 1"),
    "reorder two lines": (_swap(1, 2), 2, "has seq 2"),
    "reorder the last two lines": (_swap(4, 5), 5, "has seq 5"),
    "insert a forged, re-chained line": (_insert_forged, 6, "does not match trust.head"),
    "append an unchained line": (_append_unchained, 7, "prev does not match"),
    "truncate the last record": (_truncate(1), 6, "1 removed from the end"),
    "truncate the last two records": (_truncate(2), 5, "2 removed from the end"),
    "truncate everything": (_truncate(6), 1, "6 removed from the end"),
    "delete trust.jsonl": (_remove_log, 1, "6 removed from the end"),
    "head is garbage": (_set_head(b"not json"), None, "not valid JSON"),
    "head has another hash": (_set_head(_head_doc(6, digest("other"))), 6, "does not match"),
    "head counts more records": (_set_head(_head_doc(7, digest("other"))), 7, "removed"),
    "head two records behind": (_set_head(lambda heads: heads[3]), 6, "records follow"),
    "head reset to empty": (_set_head(_head_doc(0, GENESIS)), 2, "records follow"),
    "head deleted": (_set_head(None), None, "trust.head is missing"),
    "head has an unknown field": (
        _set_head(json.dumps({"v": 1, "count": 6, "head": GENESIS, "x": 1}).encode()),
        None,
        "fields",
    ),
    "head pairs count 0 with a hash": (_set_head(_head_doc(0, digest("x"))), None, "wrong head"),
}


@pytest.fixture
def six(log: TrustLog) -> tuple[TrustLog, list[bytes], list[bytes]]:
    """A log of six records, its lines, and a copy of trust.head after each append."""
    heads = []
    for i in range(6):
        action = "revoke" if i == 4 else "trust"
        log.append(action, PROJECT, digest(i % 4), extra={"n": str(i)})
        heads.append((log.home / "trust.head").read_bytes())
    return log, lines_of(log), heads


@pytest.mark.parametrize("name", list(TAMPERS))
def test_tampering_is_detected(six: tuple[TrustLog, list[bytes], list[bytes]], name: str) -> None:
    log, lines, heads = six
    tamper, first_bad, problem = TAMPERS[name]
    assert log.verify().ok
    tamper(log, list(lines), heads)

    report = TrustLog(log.home).verify()
    assert not report.ok
    assert report.first_bad == first_bad, report.problem
    assert problem in report.problem

    with pytest.raises(TrustLogTampered) as info:
        TrustLog(log.home).records()
    error = info.value
    assert isinstance(error, Refused) and error.exit_code == EXIT_REFUSED
    if first_bad is not None:
        assert f"line {first_bad} (seq {first_bad - 1})" in error.message
    assert problem in error.message
    assert "agentstack trust log --verify" in error.hint and str(log.path) in error.hint
    with pytest.raises(TrustLogTampered):
        TrustLog(log.home).state_for(PROJECT, digest(0))
    with pytest.raises(TrustLogTampered):
        TrustLog(log.home).trusted_digests(PROJECT)

    files = {p.name: p.read_bytes() for p in log.home.iterdir()}
    for writer in (log, TrustLog(log.home)):  # one that appended before, one fresh
        with pytest.raises(TrustLogTampered) as info:
            writer.append("trust", PROJECT, digest("more"))
        if first_bad is not None:
            assert f"line {first_bad} (seq {first_bad - 1})" in info.value.message
        assert {p.name: p.read_bytes() for p in log.home.iterdir()} == files


def test_the_head_is_what_catches_a_rechained_forgery(
    six: tuple[TrustLog, list[bytes], list[bytes]],
) -> None:
    log, lines, _ = six
    forged = _forge_chain(lines, 2)
    _write_lines(log, forged)
    assert not log.verify().ok
    # The forged chain is internally consistent: with a head rewritten to match, it would pass.
    (log.home / "trust.head").write_bytes(_head_doc(len(forged), b3(forged[-1])))
    assert log.verify().ok
    assert log.state_for(PROJECT, digest("evil")) == "trusted"


def test_a_head_one_record_behind_reads_as_an_interrupted_writer(
    six: tuple[TrustLog, list[bytes], list[bytes]],
) -> None:
    log, _, heads = six
    # Indistinguishable from a crash between the line's fsync and the head's replace; the record
    # is kept (not lost), so rolling the head back one step gains an attacker nothing.
    (log.home / "trust.head").write_bytes(heads[4])
    report = log.verify()
    assert report.ok and report.pending == 1 and report.count == 6
    assert log.records()[-1].extra == {"n": "5"}
    assert log.append("trust", PROJECT, digest(9)).seq == 6
    assert log.head()[0] == 7


def test_a_handwritten_log_without_head_or_lock_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    doc = {
        "v": 1,
        "seq": 0,
        "time": "2026-01-01T00:00:00Z",
        "action": "trust",
        "project": PROJECT,
        "digest": digest(1),
        "lock": "",
        "prev": GENESIS,
    }
    (home / "trust.jsonl").write_bytes(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    )
    log = TrustLog(home)
    report = log.verify()
    assert not report.ok and "trust.head is missing" in report.problem
    with pytest.raises(TrustLogTampered):
        log.state_for(PROJECT, digest(1))
    with pytest.raises(TrustLogTampered):
        log.append("trust", PROJECT, digest(2))


def test_head_refuses_a_malformed_head_file(log: TrustLog) -> None:
    log.append("trust", PROJECT, digest(1))
    (log.home / "trust.head").write_bytes(b"{" * 5000)
    with pytest.raises(TrustLogTampered, match="larger than"):
        log.head()
    (log.home / "trust.head").write_bytes(_head_doc(-1, GENESIS))
    with pytest.raises(TrustLogTampered, match="invalid count"):
        log.head()
    (log.home / "trust.head").write_bytes(
        json.dumps({"v": 2, "count": 1, "head": GENESIS}).encode()
    )
    with pytest.raises(TrustLogTampered, match="format version"):
        log.head()


# ------------------------------------------------------------------ the storage refuses


def _enospc(*args: object, **kwargs: object) -> None:
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["write", "fsync", "head"])
def test_append_is_all_or_nothing_when_the_disk_is_full(
    log: TrustLog, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A full disk at any step of an append leaves the log exactly as it was, and says so."""
    import agentstack.trust.store as trustlog
    from agentstack.storage import StorageError

    log.append("trust", PROJECT, digest(1))
    before = (log.path.read_bytes(), log.head_path.read_bytes())
    if where == "write":
        real_write = trustlog.os.write

        def short_then_full(fd: int, data: bytes) -> int:
            if len(data) > 10:
                return real_write(fd, bytes(data[:10]))  # a partial line lands first
            _enospc()
            return 0

        monkeypatch.setattr(trustlog.os, "write", short_then_full)
    elif where == "fsync":
        monkeypatch.setattr(trustlog.os, "fsync", _enospc)
    else:
        monkeypatch.setattr(trustlog.os, "replace", _enospc)
    with pytest.raises(StorageError) as caught:
        log.append("revoke", PROJECT, digest(1))
    monkeypatch.undo()
    assert caught.value.exit_code == EXIT_REFUSED
    text = "\n".join(caught.value.diagnostics())
    assert "the disk is full" in text and "revoke record" in text and "nothing of it" in text
    assert "df -h" in text
    assert (log.path.read_bytes(), log.head_path.read_bytes()) == before
    assert not [p for p in log.home.iterdir() if p.name.startswith(".trust.head.")]
    assert log.verify().ok and log.state_for(PROJECT, digest(1)) == "trusted"
    assert log.append("revoke", PROJECT, digest(1)).seq == 1


def test_repeated_failures_never_read_as_tampering(
    log: TrustLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line left past the head (a writer killed before its head) is adopted before another is
    written: a second failing append cannot leave two lines past the head."""
    import agentstack.trust.store as trustlog
    from agentstack.storage import StorageError

    log.append("trust", PROJECT, digest(1))

    class Killed(BaseException):
        pass

    def killed(*args: object) -> None:
        raise Killed

    monkeypatch.setattr(trustlog.os, "replace", killed)
    with pytest.raises(Killed):
        log.append("revoke", PROJECT, digest(1))
    monkeypatch.setattr(trustlog.os, "replace", _enospc)
    for _ in range(3):
        with pytest.raises(StorageError):
            TrustLog(log.home).append("trust", PROJECT, digest(2))
        report = TrustLog(log.home).verify()
        assert report.ok and report.pending == 1 and report.count == 2
    monkeypatch.undo()
    assert TrustLog(log.home).append("trust", PROJECT, digest(2)).seq == 2
    report = TrustLog(log.home).verify()
    assert report.ok and report.pending == 0 and report.count == 3


def test_a_read_only_home_refuses_before_anything_is_written(tmp_path: Path) -> None:
    import errno

    from agentstack.storage import StorageError, storage_error

    exc = storage_error(OSError(errno.EROFS, "ro"), tmp_path, "recording x")
    assert isinstance(exc, StorageError) and "read-only" in exc.message
    assert "remount" in exc.hint
