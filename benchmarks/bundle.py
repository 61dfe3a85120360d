"""share -> receive -> release of a generated project, timed in-process.

    .venv/bin/python benchmarks/bundle.py [--files 2000] [--mb 40]

A local skill of N files totalling M MB (half random bytes, half text, so it compresses like a
real tree), locked and trusted in one AGENTSTACK_HOME, shared, then received and released in a
second one. Prints the bundle size and the median of 3 runs of each step. Leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def _generate(root: Path, files: int, total: int) -> None:
    rng = random.Random(7)
    skill = root / "skills/big"
    skill.mkdir(parents=True)
    (root / "agentstack.toml").write_text(
        '[project]\nname = "bench"\n\n[skills.big]\npath = "skills/big"\n'
    )
    (skill / "SKILL.md").write_text("---\nname: big\ndescription: b\n---\n")
    size = total // files
    for index in range(files - 1):
        directory = skill / f"d{index % 50:02d}"
        directory.mkdir(exist_ok=True)
        data = (
            rng.randbytes(size)
            if index % 2
            else (
                " ".join(
                    rng.choice(["lorem", "ipsum", "dolor", "sit", "amet"]) for _ in range(size // 6)
                )
            ).encode()[:size]
        )
        (directory / f"f{index}.txt").write_bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=40)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="agentstack-bundle-bench-"))
    try:
        os.environ["AGENTSTACK_HOME"] = str(base / "alice")
        os.environ["AGENTSTACK_CACHE"] = str(base / "cache")
        import agentstack.share.bundle as bundle
        import agentstack.share.quarantine as quarantine
        from agentstack.consent.document import consent_digest, consent_document
        from agentstack.lock.command import run_lock
        from agentstack.lock.resolve import fresh_lock
        from agentstack.manifest.load import load_manifest
        from agentstack.share.sshsig import PrivateKey
        from agentstack.trust.review import TrustStore

        project = base / "project"
        _generate(project, args.files, args.mb * 1_000_000)
        run_lock(project=project, check=False, frozen=False, update=False, as_json=False)
        manifest = load_manifest(project)
        lock = fresh_lock(project, manifest)
        document = consent_document(manifest, lock)
        TrustStore().trust(project, consent_digest(document), document, "b3:" + "0" * 64)
        key = PrivateKey(bytes(32))
        shares, receives, releases = [], [], []
        built = None
        for run in range(3):
            os.environ["AGENTSTACK_HOME"] = str(base / "alice")
            start = time.perf_counter()
            built = bundle.build(project, key, now=1.8e9)
            shares.append(time.perf_counter() - start)
            path = base / f"b{run}.astack"
            path.write_bytes(built.data)
            os.environ["AGENTSTACK_HOME"] = str(base / f"bob{run}")
            start = time.perf_counter()
            held = quarantine.receive(path, now=1.8e9 + 60).held
            receives.append(time.perf_counter() - start)
            statement, contents, _ = quarantine.verify_held(held)
            start = time.perf_counter()
            quarantine.release(
                held, base / f"dest{run}", contents=contents, statement=statement, principals=["x"]
            )
            releases.append(time.perf_counter() - start)
        assert built is not None
        raw = sum(m.size for m in built.statement.members)
        print(f"{args.files} files, {raw / 1e6:.1f} MB -> bundle {len(built.data) / 1e6:.1f} MB")
        for name, values in (
            ("share", shares),
            ("receive", receives),
            ("release (+ lock check)", releases),
        ):
            print(
                f"{name:<24} median {statistics.median(values):.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)})"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
