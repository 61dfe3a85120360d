"""The README's main job: `agentstack run --harness claude-code` of the real, interactive Claude Code
on a pseudo-terminal, for a new user (a home where Claude Code never ran), with the README's
`[sandbox.credentials.anthropic]` block (x-api-key from ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL).
Claude Code starts (no start-up check that needs a tunnel), a turn completes against the model
stand-in on 127.0.0.1, the stand-in receives the real key, and the harness holds only the phantom.

Skips locally when Claude Code is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import struct
import sys
import termios
import time
from pathlib import Path

from tests.conftest import REPO, make_project, run_cli
from tests.harness.binaries import harness_bin
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.test_harness_confined import REAL_KEY, var_home  # noqa: F401 (a fixture)
from tests.support.ptyspawn import pty_spawn

README = (REPO / "README.md").read_text(encoding="utf-8")
_ANSI = re.compile(rb"\x1b\[[0-9;?<>]*[a-zA-Z~]|\x1b\][^\x07]*\x07|\x1b.")


def tls_stand_in(model: MockModel, directory: Path) -> tuple[str, Path]:
    """Serve `model` over TLS with a certificate for 127.0.0.1 from a CA made here: the URL, and
    the CA's PEM (the only trust anchor that accepts it, handed to the proxy as SSL_CERT_FILE)."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentstack test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    server = model._server
    assert server is not None
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return f"https://127.0.0.1:{model.port}", ca_pem


def _assert_tls_only(port: int, ca_pem: Path) -> None:
    """The stand-in speaks TLS only, with a certificate only the test's CA vouches for."""
    import http.client
    import ssl

    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        plain.request("GET", "/")
        with contextlib.suppress(http.client.HTTPException, OSError):
            assert plain.getresponse().status >= 400
    except OSError:
        pass
    finally:
        plain.close()
    default = http.client.HTTPSConnection("127.0.0.1", port, timeout=30,
                                          context=ssl.create_default_context())
    try:
        default.request("GET", "/")
        raise AssertionError("the stand-in's certificate passed without the test's CA")
    except ssl.SSLError:
        pass
    finally:
        default.close()


def _readme_block() -> str:
    block = re.search(r"```toml\n(\[sandbox\.credentials\.anthropic\]\n.*?)```", README, re.S)
    assert block, "README.md has no [sandbox.credentials.anthropic] block"
    return block.group(1)


class Screen:
    def __init__(self, fd: int) -> None:
        self.fd, self.raw = fd, b""

    @property
    def text(self) -> str:
        # Without escapes and without blanks (the screen positions words with cursor moves).
        plain = _ANSI.sub(b"", self.raw).decode("utf-8", "replace")
        return "".join(plain.split())

    def pump(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.raw += chunk
        return True

    def wait_for(self, pattern: str, timeout: float = 90) -> bool:
        pattern = "".join(pattern.split())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pattern in self.text:
                return True
            if not self.pump(0.3):
                return pattern in self.text
        return False


ONBOARDING = ("Choose the text style", "Security notes", "Press Enter to continue")


def _through_onboarding(screen: Screen, fd: int, timeout: float = 180) -> bool:
    answered: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = screen.text
        if "automode" in text[text.rfind("Welcome"):]:
            return True
        for prompt in ONBOARDING:
            key = "".join(prompt.split())
            count = text.count(key)
            if count > answered.get(key, 0):
                answered[key] = count
                screen.pump(1.0)  # let the step finish drawing
                os.write(fd, b"\r")
        if "ERR_PROXY_TUNNEL" in text or not screen.pump(0.5):
            return False
    return False


def test_interactive_claude_under_run_through_the_credential_proxy(tmp_path: Path,
                                                                   var_home: Path) -> None:  # noqa: F811
    harness_bin("claude")
    root = (tmp_path / "readme").resolve()
    block = _readme_block()
    assert 'header = "x-api-key"' in block and 'env = "ANTHROPIC_API_KEY"' in block
    (tmp_path / "tls").mkdir()
    with MockModel([ToolCall("Bash", {"command": "env > env.txt"})]) as model:
        upstream, ca_pem = tls_stand_in(model, tmp_path / "tls")
        _assert_tls_only(model.port, ca_pem)
        make_project(root, '[project]\nname = "readme"\nharnesses = ["claude-code"]\n\n'
                     '[settings.permissions]\nallow = ["Bash(env > env.txt)"]\n\n'
                     '[sandbox]\nwrite_dirs = ["."]\n\n'
                     + block.replace("https://api.anthropic.com", upstream))
        env = {"HOME": str(var_home)}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        # The proxy (outside the sandbox) trusts the test's CA, as it would a corporate one.
        shell = f'"{sys.executable}" -m agentstack run --harness claude-code; echo "RUN-DONE $?"'
        pid, fd = pty_spawn(["/bin/sh", "-c", shell],
                            env={**env, "PYTHONPATH": str(REPO), "TERM": "xterm-256color",
                                 "SSL_CERT_FILE": str(ca_pem)},
                            cwd=root, unset=("ANTHROPIC_API_KEY",))
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        screen = Screen(fd)
        try:
            # A new user's first start: Claude Code's own onboarding (a theme, the security
            # notes), answered with Enter as a user would; then the prompt.
            assert _through_onboarding(screen, fd), screen.text[-3000:]
            assert "ERR_PROXY_TUNNEL" not in screen.text and "Failedtoconnect" not in screen.text
            os.write(fd, b"go\r")
            deadline = time.monotonic() + 120
            while len(model.main_requests()) < 2 and time.monotonic() < deadline:
                screen.pump(0.5)  # the tool call, then the final answer after its result
            assert len(model.main_requests()) >= 2, screen.text[-3000:]
            assert screen.wait_for("All done.", 60), screen.text[-3000:]
            os.write(fd, b"/exit\r")
            assert screen.wait_for("RUN-DONE 0", 60), screen.text[-3000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(fd)
    # The stand-in got the real key; Claude Code held only the phantom.
    keys = {r.header("x-api-key") for r in model.main_requests()}
    assert keys == {REAL_KEY}, keys
    seen = dict(line.split("=", 1) for line in (root / "env.txt").read_text().splitlines()
                if "=" in line)
    assert seen.get("ANTHROPIC_API_KEY") and seen["ANTHROPIC_API_KEY"] != REAL_KEY
    assert REAL_KEY not in (root / "env.txt").read_text()
    assert not model.errors, model.errors
    assert json.loads(json.dumps(model.errors)) == []
