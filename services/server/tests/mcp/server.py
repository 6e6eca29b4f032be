"""An MCP server for Baton's tests, built with the official MCP Python SDK (PyPI `mcp`).

Baton's MCP client is tested against this server, not against a server of its own: the
protocol (handshake, sessions, SSE framing, progress, cancellation, the 2026-07-28
per-request envelope) is the SDK's. The server adds only what a test needs to see from
outside: a log of every tool execution and a few files that change its behaviour.

    python server.py --state DIR [--mode legacy|json|stateless|modern] [--bearer TOKEN]
                     [--port N]

It serves Streamable HTTP at http://127.0.0.1:<port>/mcp, on a socket it binds itself
(port 0 unless `--port`: no race for a free port), and prints `listening <port>` once it
accepts requests. SIGTERM stops it cleanly.

Modes (the MCP-Protocol-Version header routes each POST, so a mode is which eras answer):
  legacy     stateful sessions (Mcp-Session-Id), SSE responses, the initialize handshake
             only: a request naming a protocol version the handshake does not know (e.g.
             `server/discover` at 2026-07-28) gets 400, as a 2025-era server answers, so a
             client falls back to `initialize`. `notifications/cancelled` cancels a call
             (answered with error -32800); a closed response stream does not.
  json       as legacy, but each POST is answered with one application/json body, so
             progress notifications have no way to the client and are dropped.
  stateless  as legacy, but without sessions: every POST stands alone (no initialize
             needed), answered over SSE. A posted `notifications/cancelled` reaches
             nothing; closing the response stream cancels the call.
  modern     the SDK's default: answers both eras. `server/discover` and 2026-07-28
             enveloped requests (`params._meta` with the protocol version and client
             capabilities, plus the MCP-Protocol-Version / Mcp-Method / Mcp-Name
             headers) are served one POST at a time, no session: JSON, or SSE once the
             call sends a notification. A posted `notifications/cancelled` is acknowledged
             (202) and ignored; closing the response stream cancels the call.
             `initialize` still opens a handshake session, as in legacy.

With `--bearer TOKEN` every HTTP request must carry `Authorization: Bearer TOKEN`; any
other gets 401 with a JSON body.

Files in DIR:
  executions.jsonl  written: one JSON line per tool event, flushed at once:
                    {"tool", "arguments", "idempotency_key_meta" (params._meta
                    ["baton/idempotency_key"]; a non-string as its JSON text),
                    "idempotency_key_header" (the HTTP Idempotency-Key header),
                    "protocol_version" (of the request), "event"}, where event is
                    "started" when a tool begins, then "finished" when it returns or raises,
                    or "cancelled" when it is cancelled (see the modes; the server's
                    shutdown cancels calls in flight too).
  counter           the `increment` tool's total.
  variant           `2` changes the tool list (read at every request): `lookup` needs a
                    `scope` too (answering "value of <key> in <scope>") and its
                    description says so, `extra` appears, `fail` disappears.

Tools: lookup(key) -> "value of <key>" (read-only); increment(by=1) -> structured
{"count": <new total>} (annotated read-only, which is a lie: it mutates the counter);
slow(seconds) sleeps, then "slept"; count_to(n) reports progress i/n ("step i") every
0.05 s, then "counted to <n>"; fail(reason) is an error result (isError) with the reason;
extra() -> "extra" (variant 2 only).
"""

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import threading
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from typing_extensions import TypedDict

IDEMPOTENCY_META_KEY = "baton/idempotency_key"
READ_ONLY = ToolAnnotations(read_only_hint=True)


class Count(TypedDict):
    count: int


def text(value: Any) -> str | None:
    """A key as recorded: a string as is, anything else (a client's mistake) as its JSON."""
    return value if value is None or isinstance(value, str) else json.dumps(value)


class State:
    """The state directory: what the tools record and the files tests set."""

    def __init__(self, root: str):
        self.root = root
        self.lock = threading.Lock()
        os.makedirs(root, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def record(self, ctx: Context, tool: str, event: str) -> None:
        request = ctx.request_context
        params = request.params or {}
        meta = params.get("_meta")
        headers = ctx.headers
        entry = {
            "tool": tool,
            "arguments": params.get("arguments") or {},
            "idempotency_key_meta": text(meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else None),
            "idempotency_key_header": headers.get("idempotency-key") if headers is not None else None,
            "protocol_version": request.protocol_version,
            "event": event,
        }
        with self.lock, open(self.path("executions.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()

    @contextlib.contextmanager
    def execution(self, ctx: Context, tool: str):
        """Records a tool's execution: started, then finished or cancelled."""
        self.record(ctx, tool, "started")
        try:
            yield
        except anyio.get_cancelled_exc_class():
            self.record(ctx, tool, "cancelled")
            raise
        except BaseException:
            self.record(ctx, tool, "finished")
            raise
        self.record(ctx, tool, "finished")

    def variant(self) -> str:
        try:
            with open(self.path("variant")) as f:
                return f.read().strip() or "1"
        except FileNotFoundError:
            return "1"

    def increment(self, by: int) -> int:
        with self.lock:
            try:
                with open(self.path("counter")) as f:
                    count = int(f.read().strip() or 0)
            except FileNotFoundError:
                count = 0
            count += by
            with open(self.path("counter"), "w") as f:
                f.write(str(count))
            return count


def build(state: State) -> MCPServer:
    server = MCPServer("baton-test-mcp", version="1.0.0", log_level="WARNING")

    async def lookup(key: str, ctx: Context) -> str:
        """Looks a key up."""
        with state.execution(ctx, "lookup"):
            return f"value of {key}"

    async def lookup_scoped(key: str, scope: str, ctx: Context) -> str:
        """Looks a key up within a scope."""
        with state.execution(ctx, "lookup"):
            return f"value of {key} in {scope}"

    async def increment(ctx: Context, by: int = 1) -> Count:
        """Adds to the counter and returns the new total."""
        with state.execution(ctx, "increment"):
            return Count(count=state.increment(by))

    async def slow(seconds: float, ctx: Context) -> str:
        """Sleeps, then answers."""
        with state.execution(ctx, "slow"):
            await anyio.sleep(seconds)
            return "slept"

    async def count_to(n: int, ctx: Context) -> str:
        """Counts to n, reporting progress at each step."""
        with state.execution(ctx, "count_to"):
            for i in range(1, n + 1):
                await anyio.sleep(0.05)
                await ctx.report_progress(i, n, f"step {i}")
            return f"counted to {n}"

    async def fail(reason: str, ctx: Context) -> str:
        """Always fails, with the reason."""
        with state.execution(ctx, "fail"):
            raise ToolError(reason)

    async def extra(ctx: Context) -> str:
        """A tool that only the second variant has."""
        with state.execution(ctx, "extra"):
            return "extra"

    # Plain text results (no structuredContent) except `increment`'s.
    server.add_tool(increment, annotations=READ_ONLY)
    server.add_tool(slow, structured_output=False, annotations=READ_ONLY)
    server.add_tool(count_to, structured_output=False)

    variants: dict[str, list[tuple[Any, dict[str, Any]]]] = {
        "1": [
            (lookup, {"annotations": READ_ONLY}),
            (fail, {}),
        ],
        "2": [
            (lookup_scoped, {"name": "lookup", "annotations": READ_ONLY}),
            (extra, {}),
        ],
    }
    current: list[str] = []

    def use_variant(name: str) -> None:
        if current == [name]:
            return
        for tool in ("lookup", "fail", "extra"):
            with contextlib.suppress(ToolError):
                server.remove_tool(tool)
        for fn, kwargs in variants.get(name, variants["1"]):
            server.add_tool(fn, structured_output=False, **kwargs)
        current[:] = [name]

    use_variant("1")

    async def follow_variant_file(ctx: ServerRequestContext[Any, Any], call_next: CallNext):
        # Every request (tools/list and tools/call alike) sees the tools of the variant
        # the file names now.
        use_variant(state.variant())
        return await call_next(ctx)

    server.middleware.append(follow_variant_file)
    return server


class Gate:
    """ASGI wrapper: the bearer token, then (handshake-only modes) the protocol version."""

    def __init__(self, app, bearer: str | None, handshake_only: bool):
        self.app = app
        self.bearer = bearer
        self.handshake_only = handshake_only
        self.in_flight: set[anyio.CancelScope] = set()

    def close_all(self) -> None:
        """Ends every request in flight (open SSE streams included), for a quick shutdown."""
        for scope in self.in_flight:
            scope.cancel()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.bearer is not None and headers.get("authorization") != f"Bearer {self.bearer}":
            body = {"error": "invalid_token", "error_description": "a valid bearer token is required"}
            await respond(send, 401, body, [(b"www-authenticate", b'Bearer error="invalid_token"')])
            return
        version = headers.get("mcp-protocol-version")
        if self.handshake_only and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # What a server of the handshake era (spec 2025-06-18 / 2025-11-25) answers to
            # a protocol version it does not support.
            supported = ", ".join(HANDSHAKE_PROTOCOL_VERSIONS)
            message = f"Bad Request: Unsupported protocol version: {version}. Supported versions: {supported}"
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
            await respond(send, 400, body)
            return
        with anyio.CancelScope() as cancel:
            self.in_flight.add(cancel)
            try:
                await self.app(scope, receive, send)
            finally:
                self.in_flight.discard(cancel)


async def respond(send, status: int, body: dict, headers: list | None = None) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def serve(args: argparse.Namespace) -> None:
    state = State(args.state)
    server = build(state)
    app = server.streamable_http_app(
        json_response=args.mode == "json",
        stateless_http=args.mode == "stateless",
    )
    app = Gate(app, args.bearer, handshake_only=args.mode != "modern")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    http = Http(config)

    async def run_http() -> None:
        await http.serve(sockets=[sock])
        tg.cancel_scope.cancel()

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                # Streams cut short at shutdown are expected: not worth an error line each.
                for name in ("uvicorn.error", "mcp"):
                    logging.getLogger(name).setLevel(logging.CRITICAL)
                app.close_all()
                http.should_exit = True
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal)
        tg.start_soon(run_http)
        while not http.started:
            await anyio.sleep(0.01)
        print(f"listening {port}", flush=True)


class Http(uvicorn.Server):
    """uvicorn, minus its signal handling: it re-raises SIGTERM once it has stopped, so
    the process would die of it; here SIGTERM stops the server and the process exits 0."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True, help="the directory of executions.jsonl, counter, variant")
    parser.add_argument("--mode", choices=["legacy", "json", "stateless", "modern"], default="legacy")
    parser.add_argument("--bearer", help="require Authorization: Bearer TOKEN")
    parser.add_argument("--port", type=int, default=0)
    anyio.run(serve, parser.parse_args())


if __name__ == "__main__":
    main()
