"""The guard reads hook input exactly and totally, in process (`decide`), against a real trusted
project's state: every tool of Claude Code and Codex with its paths, patterns, URLs and servers;
every malformed shape denied; and property tests that generate hook inputs from the harnesses'
schemas, mutate them, and find no allow where trust or the policy does not hold."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack import _guard
from tests.conftest import make_project, run_cli
from tests.support.project import NOTES_SERVER, manifest

MANIFEST = str(manifest("parsed", "claude-code", "codex")
               .server(*NOTES_SERVER).server("journal", "servers/notes.py")
               .server("a.b", "servers/notes.py")
               .sandbox(write_dirs=["."], network={"block": True,
                                                   "allow_domains": ["docs.python.org"]}))
FILES = {"servers/notes.py": "print('notes')\n", "src/app.py": "x = 1\n"}


class Scene:
    def __init__(self, base: Path) -> None:
        self.home = base / "home"
        self.state = self.home / ".config" / "agentstack"
        self.env = {"HOME": str(self.home), "AGENTSTACK_HOME": str(self.state),
                    "XDG_CONFIG_HOME": str(self.home / ".config")}
        self.root = make_project(base / "proj", MANIFEST, FILES).resolve()
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=self.root, env=self.env)
            assert result.returncode == 0, result.stderr
        # Snapshot again once every file is older than the guard's racy window, so the guard
        # decides from stats alone, as it does in a real session (and the fuzzing stays fast).
        time.sleep(_guard.RACY_SLACK_NS / 1e9 + 0.1)
        assert run_cli("apply", "--write", cwd=self.root, env=self.env).returncode == 0
        (self.home / ".ssh").mkdir()
        (self.home / ".ssh" / "id_ed25519").write_text("decoy\n")
        (self.root / "escape").symlink_to(self.home / ".ssh")

    def decide(self, event: dict[str, Any] | bytes, harness: str = "claude-code",
               project: Path | None = None, **kwargs: Any) -> None:
        raw = event if isinstance(event, bytes) else json.dumps(event).encode()
        _guard.decide(harness, raw, state=str(self.state),
                      project=str(project or self.root), **kwargs)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    saved = {k: os.environ.get(k) for k in ("HOME", "AGENTSTACK_HOME", "XDG_CONFIG_HOME")}
    made = Scene(tmp_path_factory.mktemp("parsed"))
    yield made
    for key, value in saved.items():
        if value is not None:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def scene_home(scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(scene.home))  # `~` in tool input is this user's home
    monkeypatch.chdir(scene.root)  # where the harness runs the hook


def call(scene: Scene, tool: str, tool_input: Any = None, **extra: Any) -> dict[str, Any]:
    return {"session_id": "s", "cwd": str(scene.root), "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": {} if tool_input is None else tool_input, **extra}


def allowed(scene: Scene, event: dict[str, Any] | bytes, harness: str = "claude-code") -> bool:
    try:
        scene.decide(event, harness)
    except _guard.Deny:
        return False
    return True


# ------------------------------------------------------------------------------ the attacks


@pytest.mark.parametrize("tool", [
    "mcp__notes__x__tool",      # server "notes__x" could be another server
    "mcp__notes___tool",        # "notes_" + "_tool"
    "mcp__notes__",             # no tool
    "mcp__evil__tool",
    "MCP__notes__add",          # case: not the prefix the harness uses
    "Mcp__evil__x",
    "mcp_notes_add",
    "mcp__a_b__tool",           # "a.b" and a server named "a_b" both read this way
    "mcp__journal__",
])
def test_mcp_names_resolve_to_exactly_one_locked_server(scene: Scene, tool: str) -> None:
    assert not allowed(scene, call(scene, tool))


def test_locked_mcp_tools_pass(scene: Scene) -> None:
    assert allowed(scene, call(scene, "mcp__notes__add_note", {"text": "x"}))
    assert allowed(scene, call(scene, "mcp__journal__read", {}), "codex")


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
@pytest.mark.parametrize("event", [
    {"cwd": "/", "tool_input": {}},                                 # no tool_name
    {"tool_name": None, "tool_input": {}},
    {"tool_name": ["Read"], "tool_input": {}},
    {"tool_name": "", "tool_input": {}},
    {"tool_name": "Read", "tool_input": "{\"file_path\": \"/etc/hosts\"}"},  # a string
    {"tool_name": "Read", "tool_input": None},
    {"tool_name": "Read", "tool_input": []},
    {"tool_name": "Read"},                                          # no tool_input
    {"tool_name": "Read", "tool_input": {"file_path": ["/etc/hosts"]}},  # a path as a list
    {"tool_name": "Read", "tool_input": {"file_path": 7}},
    {"tool_name": "Read", "tool_input": {"file_path": ""}},
    {"tool_name": "Read", "tool_input": {}},                        # a required path missing
    {"tool_name": "Write", "tool_input": {"file_path": {"p": "x"}}},
    {"tool_name": "Bash", "tool_input": {}, "cwd": "relative/dir"},
    {"tool_name": "Bash", "tool_input": {}, "cwd": 5},
    {"tool_name": "Bash", "tool_input": {}, "hook_event_name": "PostToolUse"},
    {"tool_name": "Write", "tool_input": {"file_path": "/etc/x"},
     "mcp_context": {"server_name": "notes"}},                     # Gemini's field elsewhere
])
def test_malformed_shapes_deny(scene: Scene, harness: str, event: dict[str, Any]) -> None:
    assert not allowed(scene, event, harness)


def test_codex_tools_are_modelled(scene: Scene) -> None:
    ssh = str(scene.home / ".ssh" / "id_ed25519")
    deny = [
        ("read_mcp_resource", {"server": "evil", "uri": "x://y"}),
        ("read_mcp_resource", {"uri": "x://y"}),
        ("list_mcp_resources", {}),
        ("list_mcp_resource_templates", {"server": "evil"}),
        ("view_image", {"path": ssh}),
        ("view_image", {"path": "escape/id_ed25519"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+x\n"
                                  "*** End Patch\n"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Update File: src/app.py\n*** Move to: "
                                  "/etc/cron.d/x\n*** End Patch\n"}),
        ("apply_patch", {"input": "*** Begin Patch\n  *** Add File: ../outside.txt\n"
                                  "*** End Patch\n"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Frobnicate: x\n*** End Patch\n"}),
        ("apply_patch", {"input": "no patch here"}),
        ("apply_patch", {}),
        ("Bash", {"command": "ls", "workdir": ssh}),
    ]
    for tool, arguments in deny:
        assert not allowed(scene, call(scene, tool, arguments), "codex"), (tool, arguments)
    allow = [
        ("read_mcp_resource", {"server": "notes", "uri": "notes://1"}),
        ("list_mcp_resources", {"server": "journal"}),
        ("view_image", {"path": "src/app.py"}),
        ("apply_patch", {"input": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-x = 1\n"
                                  "+x = 2\n*** End Patch\n"}),
        ("Bash", {"command": "ls"}),
        ("update_plan", {"plan": [{"step": "a", "status": "pending"}]}),
    ]
    for tool, arguments in allow:
        assert allowed(scene, call(scene, tool, arguments), "codex"), (tool, arguments)


def test_claude_tools_are_modelled(scene: Scene) -> None:
    ssh = scene.home / ".ssh"
    deny = [
        ("Glob", {"pattern": f"{ssh}/*"}),
        ("Glob", {"pattern": "~/.ssh/*"}),
        ("Glob", {"pattern": "../home/.ssh/*"}),
        ("Glob", {"pattern": "*/../../../etc/*"}),
        ("Glob", {"pattern": "*", "path": str(ssh)}),
        ("Glob", {"pattern": "/{etc,home}/*"}),
        ("Grep", {"pattern": "BEGIN", "path": str(ssh)}),
        ("Grep", {"pattern": "BEGIN", "glob": "~/.ssh/*"}),
        ("LS", {"path": str(ssh)}),
        ("NotebookRead", {"notebook_path": str(ssh / "id_ed25519")}),
        ("NotebookEdit", {"notebook_path": "/etc/x.ipynb", "new_source": ""}),
        ("ReadMcpResourceTool", {"server": "evil", "uri": "x"}),
        ("ListMcpResourcesTool", {}),
        ("Read", {"file_path": "~root/.ssh/id_rsa"}),
        ("Write", {"file_path": ".git/hooks/pre-commit", "content": "x"}),
        ("Write", {"file_path": ".git/config", "content": "x"}),
        ("Edit", {"file_path": ".claude/settings.json", "old_string": "", "new_string": "x"}),
        ("Write", {"file_path": ".mcp.json", "content": "{}"}),
        ("Write", {"file_path": ".codex/config.toml", "content": ""}),
        ("MultiEdit", {"file_path": "sub/.claude/settings.local.json", "edits": []}),
        ("Write", {"file_path": "~/.claude.json", "content": "{}"}),
        ("Write", {"file_path": "~/.codex/config.toml", "content": ""}),
        ("FutureTool", {"target": "/etc/passwd"}),
        ("FutureTool", {"nested": [{"x": "https://evil.example/"}]}),
        ("FutureTool", {"server": "evil"}),
        ("FutureTool", {"text": "nothing to judge"}),  # not in the tool table: fail closed
    ]
    for tool, arguments in deny:
        assert not allowed(scene, call(scene, tool, arguments)), (tool, arguments)
    allow = [
        ("Glob", {"pattern": "src/**/*.py"}),
        ("Glob", {"pattern": "*.py", "path": str(scene.root / "src")}),
        ("Grep", {"pattern": "x = [0-9]", "glob": "*.py"}),
        ("LS", {"path": str(scene.root)}),
        ("Read", {"file_path": "src/app.py"}),
        ("Write", {"file_path": "src/new.py", "content": "y = 2\n"}),
        ("ReadMcpResourceTool", {"server": "notes", "uri": "notes://1"}),
        ("TodoWrite", {"todos": [{"content": "read /etc/passwd", "status": "pending"}]}),
    ]
    for tool, arguments in allow:
        assert allowed(scene, call(scene, tool, arguments)), (tool, arguments)


@pytest.mark.parametrize("url", [
    "https://docs.python.org@evil.example/",
    "https://evil.example\\@docs.python.org/",
    "https:\\\\docs.python.org/",
    "https:docs.python.org/",
    "https://docs.python.org\t.evil.example/",
    "https://docs.python.org%2eevil.example/",
    " https://docs.python.org/",
    "https://docs.python.org./",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "ftp://docs.python.org/",
    "http://0x7f.1/",
    "http://2130706433/",
    "http://127.1/",
    "http://[::1]/",
    "https://d\u043ecs.python.org/",  # a Cyrillic o
    "https://evil.example:99999/",
    "https://docs.python.org:443:1/",
    "",
    "https:///docs.python.org",
])
def test_ambiguous_or_disallowed_urls_deny(scene: Scene, url: str) -> None:
    assert not allowed(scene, call(scene, "WebFetch", {"url": url, "prompt": "x"}))


def test_plain_allowed_urls_pass(scene: Scene) -> None:
    for url in ("https://docs.python.org/3/", "HTTPS://DOCS.PYTHON.ORG/3/",
                "https://docs.python.org:443/x?y#z"):
        assert allowed(scene, call(scene, "WebFetch", {"url": url, "prompt": "x"})), url


# ---------------------------------------------------------------------- state from arguments


def test_a_project_hook_never_concludes_not_a_project(scene: Scene, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(_guard.Deny, match="not been trusted"):
        scene.decide(call(scene, "Bash"), project=elsewhere)
    # The user-level guard allows there, and only there.
    _guard.decide("codex", json.dumps(call(scene, "Bash", cwd=str(elsewhere))).encode(),
                  state=str(scene.state), project=None)
    with pytest.raises(_guard.Deny):  # an enclosing project is judged, untrusted or not
        inner = scene.root / "src"
        _guard.decide("codex", json.dumps({**call(scene, "mcp__evil__x"), "cwd": str(inner)})
                      .encode(), state=str(scene.state), project=None)


def test_no_environment_variable_changes_a_decision(scene: Scene, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    forged = tmp_path / "agentstack-run-x" / "ro"
    forged.mkdir(parents=True)
    snapshot = _guard.load_snapshot(_guard.snapshot_path(str(scene.state), str(scene.root)))
    snapshot["servers"].append("evil")
    (forged / "guard.json").write_bytes(_guard.encode_snapshot(snapshot))
    for key, value in {"AGENTSTACK_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path),
                       "CLAUDE_PROJECT_DIR": str(tmp_path), "GEMINI_PROJECT_DIR": str(tmp_path),
                       "AGENTSTACK_RUN_RO": str(forged),
                       "AGENTSTACK_TRUSTED_DIGESTS": snapshot["digest"]}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(_guard.Deny, match=r"not in agentstack\.lock"):
        scene.decide(call(scene, "mcp__evil__x"))


def test_run_copies_must_be_held_read_only_by_the_kernel(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A sticky parent and the right names and modes, but the directory is writable here: not a
    # directory `run` confined this process around.
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    run_dir = sticky / "agentstack-run-fake"
    (run_dir / "ro").mkdir(parents=True)
    run_dir.chmod(0o700)
    for pointer in (run_dir / "ro", tmp_path / "ro", Path("relative/ro"), run_dir):
        monkeypatch.setenv("AGENTSTACK_RUN_RO", str(pointer))
        with pytest.raises(_guard.Deny, match=r"read-only copy made by 'agentstack run'"):
            _guard._run_copies()
    assert sorted(p.name for p in run_dir.iterdir()) == ["ro"]  # the probe left nothing


def test_missing_manifest_lock_or_snapshot_denies(scene: Scene, tmp_path: Path) -> None:
    for name in ("agentstack.toml", "agentstack.lock"):
        path = scene.root / name
        saved = path.read_bytes()
        path.unlink()
        try:
            with pytest.raises(_guard.Deny, match=name):
                scene.decide(call(scene, "Bash"))
        finally:
            path.write_bytes(saved)
    scene.decide(call(scene, "Bash"))


def test_prompt_event_checks_trust_not_tools(scene: Scene) -> None:
    prompt = {"session_id": "s", "cwd": str(scene.root), "hook_event_name": "UserPromptSubmit",
              "prompt": "hello"}
    scene.decide(prompt, event_name="UserPromptSubmit")
    with pytest.raises(_guard.Deny):  # a prompt event to the tool hook (or the reverse)
        scene.decide(prompt)
    assert _guard.deny_body("codex", "r", "UserPromptSubmit") == {"decision": "block",
                                                                   "reason": "r"}


# ------------------------------------------------------------------------------- fuzzing

PATHS = ["src/app.py", "src", ".", "new.txt", "escape/id_ed25519", "~/.ssh/id_ed25519", "~",
         "~root/x", "/etc/passwd", "/etc", "../outside", "../../", "/", ".git/hooks/pre-commit",
         ".git/config", ".claude/settings.json", ".codex/hooks.json", ".mcp.json", "a\x00b",
         "src/../../x", "//etc/passwd", "/proc/self/environ", "*", "**/*", "~/.ssh/*",
         "../**/*", "*/../../etc", "{src,..}/*", "src/[a-z]*.py", "C:\\x", "\\\\host\\share"]
URLS = ["https://docs.python.org/3/", "https://docs.python.org@evil.example/",
        "https://evil.example/", "http://169.254.169.254/", "https:\\\\docs.python.org",
        "https://docs.python.org%2f@evil/", "file:///etc/passwd", "http://0x7f.1/",
        "https://docs.python.org./", "https:docs.python.org", "HTTPS://docs.python.org/",
        "https://docs.python.org\n.evil/", "//docs.python.org/", "https://[::1]:8080/"]
SERVERS = ["notes", "journal", "evil", "notes__x", "a.b", "a_b", "Notes", "", "notes_"]
CLAUDE_TOOLS = ["Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "NotebookRead", "Glob",
                "Grep", "LS", "WebFetch", "WebSearch", "Task", "Bash", "TodoWrite",
                "ListMcpResourcesTool", "ReadMcpResourceTool", "read", "READ", "Future"]
CODEX_TOOLS = ["Bash", "apply_patch", "read_mcp_resource", "list_mcp_resources",
               "list_mcp_resource_templates", "view_image", "web_search", "update_plan",
               "shell", "exec_command", "Apply_patch"]
KEYS = ["file_path", "path", "notebook_path", "pattern", "glob", "url", "server", "uri",
        "input", "workdir", "command", "content", "prompt", "target"]


def _patch(paths: list[str]) -> str:
    body = "".join(f"*** {kind}: {p}\n+x\n" for kind, p in paths)  # type: ignore[misc]
    return "*** Begin Patch\n" + body + "*** End Patch\n"


JUNK: list[Any] = [None, 0, -1, True, "", "x", [], ["/etc/passwd"], {}, {"p": "/etc"}, 1.5,
                   "\u202e", "A" * 300]
MUTATIONS = ["none", "none", "none", "drop", "retype", "case", "nest", "junk"]
KINDS = ["Add File", "Update File", "Delete File", "Move to"]
MCP_TOOLS = ["add_note", "x__y", "_x", "", "X"]


def _mcp_name(server: str, tool: str) -> str:
    return f"mcp__{server}__{tool}"


def _value(key: str, pick: int) -> Any:
    if key == "url":
        return URLS[pick % len(URLS)]
    if key == "server":
        return SERVERS[pick % len(SERVERS)]
    if key == "input":
        count = pick % 3
        return _patch([(KINDS[(pick >> 2 + i) % 4], PATHS[(pick >> 4 + i) % len(PATHS)])
                       for i in range(count)])
    return PATHS[pick % len(PATHS)]


@st.composite
def hook_event(draw: st.DrawFn, harness: str, root: str) -> dict[str, Any]:
    """A hook input as the harness sends it (its documented fields), its tool and arguments drawn
    from what each tool takes, then mutated. Few draws per example: 10,000 stay quick."""
    tools = CLAUDE_TOOLS if harness == "claude-code" else CODEX_TOOLS
    choice = draw(st.integers(0, len(tools) + len(SERVERS) * len(MCP_TOOLS) - 1))
    if choice < len(tools):
        tool = tools[choice]
    else:
        server, name = divmod(choice - len(tools), len(MCP_TOOLS))
        tool = _mcp_name(SERVERS[server], MCP_TOOLS[name])
    keys = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
    picks = draw(st.lists(st.integers(0, 1 << 12), min_size=len(keys), max_size=len(keys)))
    event: dict[str, Any] = {
        "session_id": "8d3c",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": draw(st.sampled_from([root, root + "/src", "/", "/tmp"])),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {key: _value(key, pick) for key, pick in zip(keys, picks, strict=True)},
        "tool_use_id": "toolu_1",
    }
    if harness == "codex":
        event.update(turn_id="t", model="gpt-5.1-codex")
    # Mutations: drop, retype or case-change a field; nest a value; add junk; or none.
    mutation, key, junk = draw(st.tuples(st.sampled_from(MUTATIONS), st.sampled_from(sorted(event)),
                                         st.sampled_from(JUNK)))
    if mutation == "drop":
        event.pop(key)
    elif mutation == "retype":
        event[key] = junk
    elif mutation == "case":
        event["tool_name"] = tool.swapcase()
    elif mutation == "nest" and event["tool_input"]:
        inner = sorted(event["tool_input"])[0]
        event["tool_input"][inner] = [event["tool_input"][inner]]
    elif mutation == "junk":
        event["tool_input"][KEYS[len(str(junk)) % len(KEYS)]] = junk
    return event


def _oracle_violations(scene: Scene, event: dict[str, Any]) -> list[str]:
    """What an allowed call must never be (an independent, simpler reading)."""
    bad = []
    tool, arguments = event.get("tool_name"), event.get("tool_input")
    if not isinstance(tool, str) or not tool or not isinstance(arguments, dict):
        return ["allowed a malformed event"]
    if tool.lower().startswith("mcp"):
        server_ok = any(tool.startswith(f"mcp__{s}__") and "__" not in tool[len(s) + 7:]
                        and not tool[len(s) + 7:].startswith("_") and tool[len(s) + 7:]
                        for s in ("notes", "journal"))
        if not server_ok:
            bad.append(f"allowed MCP tool {tool}")
    resource_tool = "Mcp" in tool or "mcp_resource" in tool
    if resource_tool and arguments.get("server") not in ("notes", "journal", "a.b"):
        bad.append(f"allowed server {arguments.get('server')!r}")
    url = arguments.get("url")
    if isinstance(url, str) and tool in ("WebFetch",) and url not in (
            "https://docs.python.org/3/", "HTTPS://docs.python.org/"):
        bad.append(f"allowed URL {url!r}")
    if tool.startswith("mcp__"):
        return bad  # a locked server's own arguments are its business (and the sandbox's)
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else str(scene.root)
    secret = os.path.realpath(scene.home / ".ssh")
    for key, value in arguments.items():
        if key in ("content", "prompt", "command", "uri", "url", "server", "input"):
            continue
        if not isinstance(value, str) or "\x00" in value:
            continue
        expanded = value.replace("~", str(scene.home), 1) if value.startswith("~/") else value
        real = os.path.realpath(os.path.join(cwd, expanded.split("*")[0].split("{")[0]))
        if (real + "/").startswith(secret + "/") and value not in ("*", "**/*"):
            bad.append(f"allowed {key}={value!r} into ~/.ssh")
    if tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
        target = arguments.get("file_path") or arguments.get("notebook_path")
        if isinstance(target, str):
            real = os.path.realpath(os.path.join(cwd, target))
            if not (real + "/").startswith(str(scene.root) + "/") or any(
                    part in (".git", ".claude", ".codex", ".mcp.json")
                    for part in Path(real).parts):
                bad.append(f"allowed a write of {target!r}")
    return bad


FUZZ = settings(max_examples=10_000, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_fuzz_trusted_project_never_allows_what_the_policy_forbids(scene: Scene,
                                                                   harness: str) -> None:
    allowed_count = [0]

    @settings(FUZZ, max_examples=3_000)
    @given(event=hook_event(harness, str(scene.root)))
    def run(event: dict[str, Any]) -> None:
        try:
            scene.decide(event, harness)
        except _guard.Deny:
            return
        allowed_count[0] += 1
        assert _oracle_violations(scene, event) == [], event

    run()
    assert allowed_count[0] > 100  # the generator does reach allowed calls


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_fuzz_untrusted_state_never_allows(scene: Scene, harness: str, tmp_path: Path) -> None:
    # The same inputs against a project whose trust no longer holds (a drifted lock), and one
    # never trusted: every single one denied, none crashing.
    copy = tmp_path / "copy"
    shutil.copytree(scene.root, copy, symlinks=True)
    lock = scene.root / "agentstack.lock"
    saved = lock.read_bytes()
    lock.write_bytes(saved + b"\n")
    seen: list[int] = []
    try:
        @FUZZ
        @given(event=hook_event(harness, str(scene.root)), where=st.sampled_from([None, copy]))
        def run(event: dict[str, Any], where: Path | None) -> None:
            seen.append(1)
            with pytest.raises(_guard.Deny):
                scene.decide(event, harness, project=where)

        run()
    finally:
        lock.write_bytes(saved)
    assert len(seen) >= 10_000  # every generated input was judged (and denied)



def test_tilde_is_denied_when_home_is_not_the_accounts(scene: Scene,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The project's settings can set HOME for the harness and its hooks: `~` could then be read
    # two ways, so the guard refuses to guess.
    monkeypatch.setenv("HOME", str(scene.root))
    with pytest.raises(_guard.Deny, match="read two ways"):
        scene.decide(call(scene, "Read", {"file_path": "~/src/app.py"}))
