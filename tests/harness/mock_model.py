"""A scripted model server on 127.0.0.1 for driving real harnesses offline.

It speaks just enough of two wire protocols:

* the Anthropic Messages API (``POST /v1/messages``, streamed as SSE or plain JSON), for Claude Code;
* the OpenAI Responses API (``POST /v1/responses``, streamed as SSE), for Codex;
* the Gemini API (``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` and
  ``:generateContent``), for Gemini CLI;
* OpenAI chat completions (``POST /v1/chat/completions``, streamed as SSE), for OpenCode and
  Copilot CLI.

It follows a SCRIPT, a list of :class:`ToolCall`. A *main* request (one that offers tools) is answered
with the script's next tool call; which one is "next" is the number of this mock's tool calls already
present in that request's conversation, so the follow-up request (carrying the tool result) gets the
next call, and once the script is exhausted a final text. Side requests (Claude Code's title
generation and the like, which offer no tools) get a short text; ``count_tokens`` gets a count;
``HEAD``/``GET`` get 404 (``GET /v1/models`` an empty list).

Everything is recorded: every request (method, path, headers, parsed JSON body), every tool call
sent, and every tool result received (``tool_result`` blocks from Claude Code, ``function_call_output``
items from Codex) with its error flag and text, so a test can assert that a hook's deny reason reached
the model, or that the tool ran.

Generic calls are mapped to each harness's tools:

* ``ToolCall("Bash", {"command": "..."})``: for Claude Code, the ``Bash`` tool as is. For Codex, the
  shell tool the request offers: ``exec_command`` (``{"cmd": ...}``), ``shell_command``
  (``{"command": ...}``) or ``shell`` (``{"command": ["bash", "-lc", ...]}``).
* ``ToolCall("mcp__<server>__<tool>", {...})``: for Claude Code, a ``tool_use`` of that name. For
  Codex, a ``function_call`` with ``"namespace": "mcp__<server>"`` and ``"name": "<tool>"`` (Codex
  0.171.0 offers MCP tools as ``{"type": "namespace", "name": "mcp__<server>", "tools": [{"type":
  "function", "name": "<tool>", ...}]}``; its hooks see ``tool_name`` ``mcp__<server>__<tool>``).
  The offered tools are looked up first (as ``<namespace>__<name>``), so what the request offers
  wins over the fallback spelling.
* For Gemini CLI ``Bash`` is ``run_shell_command`` and ``mcp__<server>__<tool>`` is
  ``mcp_<server>_<tool>``; for chat completions ``Bash`` is ``bash`` and MCP tools are whichever
  offered tool ends with ``<server>_<tool>`` or ``<server>-<tool>`` (OpenCode, Copilot).

Usage::

    with MockModel([ToolCall("Bash", {"command": "touch marker.txt"})]) as model:
        env = harness_env(home, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="dummy")
        ...
        assert any("blocked by test" in r.text for r in model.tool_results)
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

SHELL_TOOLS = ("exec_command", "shell_command", "shell", "local_shell")


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes: a tool name (``"Bash"`` or ``"mcp__server__tool"`` or any
    name the harness offers) and its input."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass
class RecordedRequest:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-cased names; a repeated header's values joined with ", "
    body: Any  # parsed JSON, or None (no body / not JSON)
    raw_body: bytes
    api: str | None  # "anthropic", "openai" or None
    kind: str  # "main" (offered tools, got the script), "side", "count_tokens", "other"
    at: float = field(default_factory=time.time)  # when it arrived (wall clock, as strace's -ttt)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class SentToolCall:
    api: str
    call_id: str
    name: str  # the name as sent (for Codex without the namespace)
    namespace: str | None  # Codex MCP namespace, else None
    input: dict[str, Any]
    script_index: int
    at: float = field(default_factory=time.time)  # when the mock sent it (wall clock)


@dataclass
class ToolResult:
    api: str
    call_id: str
    is_error: bool | None  # Claude Code's is_error; Codex has no such flag (None)
    text: str
    raw: Any


def _text_of(content: Any) -> str:
    """The text in a tool result's content (a string, or a list of blocks/items)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part) for part in content)
    if isinstance(content, dict):
        for key in ("text", "output", "content"):
            if key in content:
                return _text_of(content[key])
        return json.dumps(content)
    return str(content)


class MockModel:
    """Threaded HTTP server on 127.0.0.1:<random port>; use as a context manager."""

    def __init__(self, script: list[ToolCall] | None = None, *, final_text: str = "All done.",
                 side_text: str = "Offline test") -> None:
        self.script = list(script or [])
        self.final_text = final_text
        self.side_text = side_text
        # A main request holding `sub_marker` anywhere (a subagent's, whose definition carries
        # it in its prompt) is answered with `sub_text` and no tool call: the script is the
        # main agent's, never replayed inside the subagent it starts.
        self.sub_marker: str | None = None
        self.sub_text = "Subagent done."
        self.requests: list[RecordedRequest] = []
        self.tool_calls: list[SentToolCall] = []
        self.tool_results: list[ToolResult] = []
        self.errors: list[str] = []  # what the mock could not handle (a test may assert it is empty)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._seen_results: set[tuple[str, str]] = set()
        self._server: ThreadingHTTPServer | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> MockModel:
        mock = self

        class Handler(_Handler):
            model = mock

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, name="mock-model",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MockModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens (or listened) on."""
        assert self._port is not None, "MockModel not started"
        return self._port

    @property
    def url(self) -> str:
        """Base URL for Claude Code's ``ANTHROPIC_BASE_URL`` (no ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for a Codex ``[model_providers.*] base_url`` (with ``/v1``)."""
        return f"{self.url}/v1"

    # -- queries for tests -----------------------------------------------------------------------
    def main_requests(self, api: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == "main" and (api is None or r.api == api)]

    def result_texts(self) -> list[str]:
        with self._lock:
            return [r.text for r in self.tool_results]

    def tools_offered(self, api: str | None = None) -> list[str]:
        """Names of the tools the last main request offered (Codex namespaced tools as
        ``<namespace>__<name>``, e.g. ``mcp__notes__add_note``)."""
        mains = self.main_requests(api)
        if not mains:
            return []
        return [name for name, _ in offered_tools(mains[-1].body)]

    # -- internals -------------------------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}mock"

    def _is_sub(self, body: Any) -> bool:
        return self.sub_marker is not None and self.sub_marker in json.dumps(body)

    def _record_results(self, api: str, results: list[ToolResult]) -> None:
        for result in results:
            key = (api, result.call_id)
            if key not in self._seen_results:
                self._seen_results.add(key)
                self.tool_results.append(result)

    # Anthropic -----------------------------------------------------------------------------------
    def handle_anthropic(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
        """Returns (kind, content blocks, stop_reason)."""
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        results: list[ToolResult] = []
        ours = 0
        for message in messages:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and str(block.get("id", "")).endswith("mock"):
                    ours += 1
                if block.get("type") == "tool_result":
                    results.append(ToolResult("anthropic", str(block.get("tool_use_id", "")),
                                              block.get("is_error"),
                                              _text_of(block.get("content")), block))
        with self._lock:
            self._record_results("anthropic", results)
            if not tools:
                return "side", [{"type": "text", "text": self.side_text}], "end_turn"
            if self._is_sub(body):
                return "main", [{"type": "text", "text": self.sub_text}], "end_turn"
            index = ours
            if index >= len(self.script):
                return "main", [{"type": "text", "text": self.final_text}], "end_turn"
            call = self.script[index]
            call_id = self._new_id("toolu_")
            self.tool_calls.append(SentToolCall("anthropic", call_id, call.name, None,
                                                dict(call.input), index))
        return "main", [{"type": "tool_use", "id": call_id, "name": call.name,
                         "input": call.input}], "tool_use"

    # OpenAI Responses --------------------------------------------------------------------------
    def handle_responses(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """Returns (kind, output items)."""
        items = body.get("input") or []
        results: list[ToolResult] = []
        ours = 0
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind in ("function_call", "custom_tool_call", "local_shell_call") and str(
                    item.get("call_id", "")).endswith("mock"):
                ours += 1
            if kind in ("function_call_output", "custom_tool_call_output",
                        "local_shell_call_output", "mcp_tool_call_output"):
                output = item.get("output")
                is_error: bool | None = None
                if isinstance(output, dict):
                    success = output.get("success")
                    is_error = (not success) if isinstance(success, bool) else None
                results.append(ToolResult("openai", str(item.get("call_id", "")), is_error,
                                          _text_of(output), item))
        offered = offered_tools(body)
        with self._lock:
            self._record_results("openai", results)
            if not offered:
                return "side", [_message_item(self._new_id("msg_"), self.side_text)]
            if self._is_sub(body):
                return "main", [_message_item(self._new_id("msg_"), self.sub_text)]
            index = ours
            if index >= len(self.script):
                return "main", [_message_item(self._new_id("msg_"), self.final_text)]
            call = self.script[index]
            name, namespace, args = map_for_codex(call, offered)
            call_id = self._new_id("call_")
            self.tool_calls.append(SentToolCall("openai", call_id, name, namespace, args, index))
        call_item: dict[str, Any] = {"type": "function_call", "id": self._new_id("fc_"),
                                     "call_id": call_id, "name": name,
                                     "arguments": json.dumps(args)}
        if namespace is not None:
            call_item["namespace"] = namespace
        return "main", [call_item]

    # Gemini ---------------------------------------------------------------------------------
    def handle_gemini(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """Returns (kind, model content parts)."""
        offered = [str(d.get("name")) for tool in body.get("tools") or [] if isinstance(tool, dict)
                   for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)]
        results: list[ToolResult] = []
        ours = 0
        for content in body.get("contents") or []:
            for part in (content.get("parts") or []) if isinstance(content, dict) else []:
                if not isinstance(part, dict):
                    continue
                if "functionCall" in part:
                    ours += 1
                response = part.get("functionResponse")
                if isinstance(response, dict):
                    payload = response.get("response")
                    error = isinstance(payload, dict) and "error" in payload
                    results.append(ToolResult("gemini", str(response.get("id") or ours),
                                              error, _text_of(payload), part))
        with self._lock:
            self._record_results("gemini", results)
            if not offered:
                return "side", [{"text": self.side_text}]
            if self._is_sub(body):
                return "main", [{"text": self.sub_text}]
            if ours >= len(self.script):
                return "main", [{"text": self.final_text}]
            call = self.script[ours]
            name, args = map_for_gemini(call, offered)
            call_id = self._new_id("gem_")
            self.tool_calls.append(SentToolCall("gemini", call_id, name, None, args, ours))
        return "main", [{"functionCall": {"id": call_id, "name": name, "args": args}}]

    # OpenAI chat completions ----------------------------------------------------------------
    def handle_chat(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Returns (kind, assistant message: {"content": str} or {"tool_calls": [...]})."""
        offered = [str(t["function"]["name"]) for t in body.get("tools") or []
                   if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        results: list[ToolResult] = []
        ours = 0
        for message in body.get("messages") or []:
            if not isinstance(message, dict):
                continue
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and str(call.get("id", "")).endswith("mock"):
                    ours += 1
            if message.get("role") == "tool":
                results.append(ToolResult("chat", str(message.get("tool_call_id", "")), None,
                                          _text_of(message.get("content")), message))
        with self._lock:
            self._record_results("chat", results)
            if not offered:
                return "side", {"content": self.side_text}
            if self._is_sub(body):
                return "main", {"content": self.sub_text}
            if ours >= len(self.script):
                return "main", {"content": self.final_text}
            call = self.script[ours]
            name, args = map_for_chat(call, offered)
            call_id = self._new_id("call_")
            self.tool_calls.append(SentToolCall("chat", call_id, name, None, args, ours))
        return "main", {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                        "function": {"name": name,
                                                     "arguments": json.dumps(args)}}]}

    # Augment (Auggie's own API, its tenant URL on the mock) ----------------------------------
    def handle_augment(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """Returns (kind, the chat-stream's response lines). Auggie sends the tool results of the
        turn as `tool_result_node`s of its `nodes`, earlier turns in `chat_history`."""
        offered = [str(t.get("name")) for t in body.get("tool_definitions") or []
                   if isinstance(t, dict)]
        results: list[ToolResult] = []
        ours = 0
        nodes = list(body.get("nodes") or [])
        for turn in body.get("chat_history") or []:
            if not isinstance(turn, dict):
                continue
            nodes += turn.get("request_nodes") or []
            for node in turn.get("response_nodes") or []:
                use = node.get("tool_use") if isinstance(node, dict) else None
                if isinstance(use, dict) and str(use.get("tool_use_id", "")).endswith("mock"):
                    ours += 1
        for node in nodes:
            result = node.get("tool_result_node") if isinstance(node, dict) else None
            if isinstance(result, dict):
                results.append(ToolResult("augment", str(result.get("tool_use_id", "")),
                                          result.get("is_error"),
                                          _text_of(result.get("content")), result))
        with self._lock:
            self._record_results("augment", results)
            if not offered:
                return "side", augment_text(self.side_text)
            if self._is_sub(body):
                return "main", augment_text(self.sub_text)
            if ours >= len(self.script):
                return "main", augment_text(self.final_text)
            call = self.script[ours]
            name, args = map_for_augment(call, offered)
            call_id = self._new_id("toolu_")
            self.tool_calls.append(SentToolCall("augment", call_id, name, None, args, ours))
        return "main", [
            {"text": "", "nodes": [{"id": 1, "type": 5, "content": "", "tool_use": {
                "tool_use_id": call_id, "tool_name": name, "input_json": json.dumps(args)}}]},
            {"text": "", "stop_reason": 3},  # TOOL_USE_REQUESTED
        ]


def _mcp_parts(call: ToolCall) -> tuple[str, str] | None:
    if not call.name.startswith("mcp__"):
        return None
    server, _, tool = call.name[len("mcp__"):].partition("__")
    return server, tool


def map_for_gemini(call: ToolCall, offered: list[str]) -> tuple[str, dict[str, Any]]:
    if call.name == "Bash":
        return "run_shell_command", {"command": call.input.get("command", "")}
    parts = _mcp_parts(call)
    if parts is not None:
        for name in (f"mcp_{parts[0]}_{parts[1]}", parts[1]):
            if name in offered:
                return name, dict(call.input)
        return f"mcp_{parts[0]}_{parts[1]}", dict(call.input)
    return call.name, dict(call.input)


def map_for_chat(call: ToolCall, offered: list[str]) -> tuple[str, dict[str, Any]]:
    if call.name == "Bash" and "bash" not in offered:
        for name, shaped in (("Bash", {"command": call.input.get("command", "")}),  # Continue
                             ("run_shell_command", {"command": call.input.get("command", "")}),
                             ("run_commands", {"commands": [call.input.get("command", "")]})):
            if name in offered:  # Qwen Code, Cline
                return name, shaped
    if call.name == "Bash":
        return "bash", {"command": call.input.get("command", ""),
                        "description": "run a command"}
    parts = _mcp_parts(call)
    if parts is not None:
        # Qwen Code names them as Claude Code does, and offers them only through its deferred
        # tools (`tool_search`, `tool_call`): called by name, they run.
        if call.name in offered or {"tool_search", "tool_call"} <= set(offered):
            return call.name, dict(call.input)
        for name in offered:
            if name.endswith((f"{parts[0]}_{parts[1]}", f"{parts[0]}-{parts[1]}")):
                return name, dict(call.input)
        return f"{parts[0]}_{parts[1]}", dict(call.input)
    return call.name, dict(call.input)


def map_for_augment(call: ToolCall, offered: list[str]) -> tuple[str, dict[str, Any]]:
    """Auggie's names: its shell is `launch-process`, an MCP tool `<tool>_<server>`."""
    if call.name == "Bash":
        return "launch-process", {"command": call.input.get("command", ""), "wait": True,
                                  "max_wait_seconds": 60, "cwd": "."}
    parts = _mcp_parts(call)
    if parts is not None:
        return f"{parts[1]}_{parts[0]}", dict(call.input)
    return call.name, dict(call.input)


def augment_text(text: str) -> list[dict[str, Any]]:
    return [{"text": text, "nodes": [{"id": 1, "type": 0, "content": text}]},
            {"text": "", "stop_reason": 1}]  # END_TURN


# What Auggie asks its tenant before a session: its models (with the tenant's feature flags,
# hooks on) and its remote tools (none).
AUGMENT_MODELS = {"default_model": "mock", "models": [{
    "name": "mock", "suggested_prefix_char_count": 100, "suggested_suffix_char_count": 100}],
    "feature_flags": {"enable_hooks": True}}


def gemini_response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "modelVersion": "gemini-mock"}


def chat_stream(chunk_id: str, model: str, message: dict[str, Any]) -> bytes:
    base = {"id": chunk_id, "object": "chat.completion.chunk", "created": 0, "model": model}
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "finish_reason": None}]}]
    if "tool_calls" in message:
        chunks.append({**base, "choices": [{"index": 0,
                                            "delta": {"tool_calls": message["tool_calls"]},
                                            "finish_reason": None}]})
        finish = "tool_calls"
    else:
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": message["content"]},
                                            "finish_reason": None}]})
        finish = "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def offered_tools(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(full name, tool spec) for each tool an OpenAI Responses request offers; namespaced tools
    come as (namespace + name, spec with "namespace" added)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(body, dict):
        return out
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            ns = str(tool.get("name", ""))
            for sub in tool.get("tools") or []:
                if isinstance(sub, dict) and "name" in sub:
                    sep = "" if ns.endswith("__") else "__"
                    out.append((f"{ns}{sep}{sub['name']}", {**sub, "namespace": ns}))
        elif "name" in tool:
            out.append((str(tool["name"]), tool))
        elif tool.get("type") == "local_shell":
            out.append(("local_shell", tool))
    return out


def map_for_codex(call: ToolCall, offered: list[tuple[str, dict[str, Any]]]
                   ) -> tuple[str, str | None, dict[str, Any]]:
    """(name, namespace, arguments) of the Codex function call for a generic ToolCall."""
    by_name = dict(offered)
    if call.name == "Bash":
        command = call.input.get("command", call.input.get("cmd", ""))
        for shell in SHELL_TOOLS:
            if shell in by_name:
                if shell == "exec_command":
                    return shell, None, {"cmd": command}
                if shell == "shell_command":
                    return shell, None, {"command": command}
                argv = command if isinstance(command, list) else ["bash", "-lc", command]
                return shell, None, {"command": argv}
        raise LookupError(f"no shell tool among the offered tools {sorted(by_name)}")
    spec = by_name.get(call.name)
    if spec is not None:
        ns = spec.get("namespace")
        if isinstance(ns, str):
            return str(spec["name"]), ns, dict(call.input)
        return call.name, None, dict(call.input)
    if call.name.startswith("mcp__"):
        server, _, tool = call.name[len("mcp__"):].partition("__")
        return tool, f"mcp__{server}", dict(call.input)
    return call.name, None, dict(call.input)


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def anthropic_stream(message_id: str, model: str, blocks: list[dict[str, Any]],
                     stop_reason: str) -> bytes:
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {
        "type": "message_start",
        "message": {"id": message_id, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1}}})]
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def responses_stream(response_id: str, model: str, items: list[dict[str, Any]]) -> bytes:
    base = {"id": response_id, "object": "response", "model": model, "created_at": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": {**base, "status": "in_progress", "output": []}})]
    for index, item in enumerate(items):
        events.append(("response.output_item.added", {
            "type": "response.output_item.added", "output_index": index, "item": item}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "output_index": index, "item": item}))
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 15}
    events.append(("response.completed", {
        "type": "response.completed",
        "response": {**base, "status": "completed", "output": items, "usage": usage}}))
    for seq, (_, data) in enumerate(events):
        data["sequence_number"] = seq
    return _sse(events)


class _Handler(BaseHTTPRequestHandler):
    model: MockModel
    protocol_version = "HTTP/1.1"
    timeout = 60  # idle keep-alive connections die instead of lingering

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _record(self, body: Any, raw: bytes, api: str | None, kind: str) -> None:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        with self.model._lock:
            self.model.requests.append(
                RecordedRequest(self.command, self.path, headers, body, raw, api, kind))

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        if content_type.startswith("text/event-stream"):
            self.send_header("cache-control", "no-cache")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def do_HEAD(self) -> None:
        self._record(None, b"", None, "other")
        self._send(404, b"", "text/plain")

    def do_GET(self) -> None:
        self._record(None, b"", None, "other")
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models":
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"type": "not_found_error", "message": "mock: not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = urlsplit(self.path).path.rstrip("/")
        try:
            if path.endswith("/messages/count_tokens"):
                self._record(body, raw, "anthropic", "count_tokens")
                self._json(200, {"input_tokens": 42})
            elif path.endswith("/messages") and isinstance(body, dict):
                self._anthropic(body, raw)
            elif path.endswith("/responses") and isinstance(body, dict):
                self._responses(body, raw)
            elif path.endswith(":countTokens"):
                self._record(body, raw, "gemini", "count_tokens")
                self._json(200, {"totalTokens": 42})
            elif path.endswith((":streamGenerateContent", ":generateContent")) and isinstance(
                    body, dict):
                self._gemini(body, raw, stream=path.endswith(":streamGenerateContent"))
            elif path.endswith("/chat/completions") and isinstance(body, dict):
                self._chat(body, raw)
            elif path == "/chat-stream" and isinstance(body, dict):
                kind, lines = self.model.handle_augment(body)
                self._record(body, raw, "augment", kind)
                self._send(200, b"".join(json.dumps(line).encode() + b"\n" for line in lines),
                           "application/json")
            elif path == "/get-models":
                self._record(body, raw, "augment", "other")
                self._json(200, AUGMENT_MODELS)
            elif path == "/agents/list-remote-tools":
                self._record(body, raw, "augment", "other")
                self._json(200, {"tools": []})
            elif path.startswith(("/settings/", "/report-", "/record-")) or path in (
                    "/client-metrics", "/batch-upload", "/find-missing", "/checkpoint-blobs"):
                # Auggie's telemetry, tenant MCP configs, workspace upload: acknowledged.
                self._record(body, raw, "augment", "other")
                self._json(200, {})
            else:
                self._record(body, raw, None, "other")
                with self.model._lock:
                    self.model.errors.append(f"unhandled POST {self.path}")
                self._json(404, {"error": {"type": "not_found_error", "message": "mock: no route"}})
        except Exception as exc:
            with self.model._lock:
                self.model.errors.append(f"{self.path}: {exc!r}")
            self._json(500, {"error": {"type": "api_error", "message": f"mock: {exc!r}"}})

    def _anthropic(self, body: dict[str, Any], raw: bytes) -> None:
        kind, blocks, stop_reason = self.model.handle_anthropic(body)
        self._record(body, raw, "anthropic", kind)
        model = str(body.get("model", "claude-mock"))
        message_id = self.model._new_id("msg_")
        if body.get("stream"):
            self._send(200, anthropic_stream(message_id, model, blocks, stop_reason),
                       "text/event-stream; charset=utf-8")
        else:
            self._json(200, {"id": message_id, "type": "message", "role": "assistant",
                             "model": model, "content": blocks, "stop_reason": stop_reason,
                             "stop_sequence": None,
                             "usage": {"input_tokens": 10, "output_tokens": 5}})

    def _responses(self, body: dict[str, Any], raw: bytes) -> None:
        kind, items = self.model.handle_responses(body)
        self._record(body, raw, "openai", kind)
        model = str(body.get("model", "gpt-mock"))
        response_id = self.model._new_id("resp_")
        self._send(200, responses_stream(response_id, model, items),
                   "text/event-stream; charset=utf-8")

    def _gemini(self, body: dict[str, Any], raw: bytes, *, stream: bool) -> None:
        kind, parts = self.model.handle_gemini(body)
        self._record(body, raw, "gemini", kind)
        if kind == "side" and isinstance(body.get("generationConfig"), dict) and \
                body["generationConfig"].get("responseMimeType") == "application/json":
            parts = [{"text": "{}"}]  # a router/classifier call that wants JSON
        response = gemini_response(parts)
        if stream:
            self._send(200, f"data: {json.dumps(response)}\r\n\r\n".encode(),
                       "text/event-stream; charset=utf-8")
        else:
            self._json(200, response)

    def _chat(self, body: dict[str, Any], raw: bytes) -> None:
        kind, message = self.model.handle_chat(body)
        self._record(body, raw, "chat", kind)
        model = str(body.get("model", "gpt-mock"))
        chunk_id = self.model._new_id("chatcmpl-")
        if body.get("stream"):
            self._send(200, chat_stream(chunk_id, model, message),
                       "text/event-stream; charset=utf-8")
        else:
            out = {"role": "assistant", "content": message.get("content")}
            if "tool_calls" in message:
                out["tool_calls"] = [{k: v for k, v in c.items() if k != "index"}
                                     for c in message["tool_calls"]]
            self._json(200, {"id": chunk_id, "object": "chat.completion", "created": 0,
                             "model": model,
                             "choices": [{"index": 0, "message": out,
                                          "finish_reason": "tool_calls" if "tool_calls" in message
                                          else "stop"}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                       "total_tokens": 15}})
