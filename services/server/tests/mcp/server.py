"""An MCP server for Baton's tests, built with the official MCP Python SDK (PyPI `mcp`).

Baton's MCP client is tested against this server, not against a server of its own: the
protocol (handshake, sessions, SSE framing, progress, cancellation, the 2026-07-28
per-request envelope) is the SDK's. The server adds only what a test needs to see from
outside: a log of every tool execution and a few files that change its behaviour.

    python server.py --state DIR [--mode legacy|json|stateless|modern] [--port N]
                     [--bearer TOKEN | --oauth CLIENT_ID:CLIENT_SECRET [--token-ttl SECONDS]]

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

With `--oauth ID:SECRET` the server is an OAuth 2.1 protected resource (MCP authorization
spec 2025-06-18 / 2025-11-25) and its own authorization server, for the client credentials
grant only. The resource side is the SDK's (`AuthSettings` + a `TokenVerifier`); the
authorization server is this script's (the SDK's has no client credentials grant). BASE is
http://127.0.0.1:<port>:
  /mcp              requires `Authorization: Bearer <token>` issued by /auth/token and
                    not expired, with scope `tools`: else 401 with `WWW-Authenticate: Bearer
                    error="invalid_token", error_description="Authentication required",
                    resource_metadata="BASE/.well-known/oauth-protected-resource/mcp"` (the
                    SDK's), or 403 insufficient_scope. Authentication comes before the
                    protocol version check of the handshake-only modes.
  GET /.well-known/oauth-protected-resource/mcp (RFC 9728; the SDK's) and, the same,
  GET /.well-known/oauth-protected-resource:
                    {"resource": "BASE/mcp", "authorization_servers": ["BASE/auth"],
                     "scopes_supported": ["tools"], "bearer_methods_supported": ["header"]}
  GET /.well-known/oauth-authorization-server/auth (RFC 8414, issuer BASE/auth):
                    {"issuer", "token_endpoint": "BASE/auth/token", "grant_types_supported":
                     ["client_credentials"], "token_endpoint_auth_methods_supported":
                     ["client_secret_basic", "client_secret_post"]}
  POST /auth/token  form-encoded `grant_type=client_credentials`, the client authenticated
                    by HTTP Basic (client_secret_basic: id and secret form-urlencoded, then
                    base64) or by `client_id` + `client_secret` fields (client_secret_post),
                    not both; optional `scope` (only `tools`; absent means `tools`) and
                    `resource` (RFC 8707: must be BASE/mcp, a trailing slash aside). Answers
                    {"access_token" (random, opaque), "token_type": "Bearer", "expires_in":
                    --token-ttl (default 3600), "scope"}. Errors (RFC 6749 5.2), checked in
                    this order: 400 invalid_request (not a form, or both methods), 401
                    invalid_client (no or wrong credentials; with `WWW-Authenticate: Basic`
                    when Basic was tried), 400 unsupported_grant_type, 400 invalid_scope,
                    400 invalid_target. Tokens live in memory: a restart forgets them.

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
  token_requests.jsonl  written (--oauth): one JSON line per POST /auth/token:
                    {"client_id" (as sent, "" when none), "auth_method" ("basic", "post" or
                    "none"), "grant_type", "scope", "resource" (as sent, or null), "granted"
                    (true when a token was issued), "error" (the OAuth error code, or null)}.
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
import base64
import binascii
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import anyio
import uvicorn
from mcp import types
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.auth import ProtectedResourceMetadata
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import ToolAnnotations
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from typing_extensions import TypedDict

IDEMPOTENCY_META_KEY = "baton/idempotency_key"
READ_ONLY = ToolAnnotations(read_only_hint=True)
SCOPE = "tools"


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

    def record_token_request(self, entry: dict) -> None:
        with self.lock, open(self.path("token_requests.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()

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


class OAuth:
    """The `--oauth` mode: the one client, the tokens issued (in memory) and the URLs."""

    def __init__(self, client_id: str, client_secret: str, ttl: int, base: str):
        self.client_id = client_id
        self.client_secret = client_secret
        self.ttl = ttl
        self.base = base
        self.resource = f"{base}/mcp"
        self.issuer = f"{base}/auth"
        # token -> (client_id, scopes, expires at (time.time()), resource)
        self.tokens: dict[str, tuple[str, list[str], float, str | None]] = {}

    def issue(self, scopes: list[str], resource: str | None) -> str:
        now = time.time()
        self.tokens = {t: v for t, v in self.tokens.items() if v[2] > now}
        token = secrets.token_urlsafe(32)
        self.tokens[token] = (self.client_id, scopes, now + self.ttl, resource)
        return token

    def lookup(self, token: str | None) -> AccessToken | None:
        entry = self.tokens.get(token) if token else None
        if entry is None or entry[2] <= time.time():
            return None
        client_id, scopes, expires_at, resource = entry
        return AccessToken(
            token=token, client_id=client_id, scopes=scopes, expires_at=int(expires_at) + 1, resource=resource
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's `TokenVerifier`."""
        return self.lookup(token)

    def settings(self) -> AuthSettings:
        return AuthSettings(
            issuer_url=self.issuer,
            resource_server_url=self.resource,
            required_scopes=[SCOPE],
            # The token endpoint refuses any `resource` but this one; a token requested
            # without one is accepted too.
            validate_token_resource=False,
        )

    def authorization_server_metadata(self) -> dict:
        return {
            "issuer": self.issuer,
            "token_endpoint": f"{self.issuer}/token",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        }

    async def token(self, request: Request, state: State) -> Response:
        """POST /auth/token: the client credentials grant (RFC 6749 4.4, OAuth 2.1)."""
        body = (await request.body()).decode("utf-8", "replace")
        form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        authorization = request.headers.get("authorization", "")
        entry: dict[str, Any] = {
            "client_id": form.get("client_id", ""),
            "auth_method": "none",
            "grant_type": form.get("grant_type"),
            "scope": form.get("scope"),
            "resource": form.get("resource"),
            "granted": False,
            "error": None,
        }

        def error(status: int, code: str, description: str, headers: dict | None = None) -> Response:
            entry["error"] = code
            state.record_token_request(entry)
            return JSONResponse(
                {"error": code, "error_description": description},
                status_code=status,
                headers={"Cache-Control": "no-store", **(headers or {})},
            )

        basic = authorization[:6].lower() == "basic "
        if basic:
            entry["auth_method"] = "basic"
        elif "client_secret" in form:
            entry["auth_method"] = "post"
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != "application/x-www-form-urlencoded":
            return error(400, "invalid_request", "the body must be application/x-www-form-urlencoded")
        if basic and "client_secret" in form:
            return error(400, "invalid_request", "more than one client authentication method")
        secret = form.get("client_secret")
        if basic:
            try:
                decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
                raw_id, raw_secret = decoded.split(":", 1)
            except (binascii.Error, UnicodeDecodeError, ValueError):
                return error(401, "invalid_client", "malformed Basic credentials", {"WWW-Authenticate": "Basic"})
            entry["client_id"] = unquote_plus(raw_id)
            secret = unquote_plus(raw_secret)
        if secret is None:
            return error(401, "invalid_client", "client authentication is required")
        if not (
            secrets.compare_digest(entry["client_id"].encode(), self.client_id.encode())
            and secrets.compare_digest(secret.encode(), self.client_secret.encode())
        ):
            challenge = {"WWW-Authenticate": "Basic"} if entry["auth_method"] == "basic" else None
            return error(401, "invalid_client", "unknown client or wrong secret", challenge)
        if entry["grant_type"] != "client_credentials":
            return error(400, "unsupported_grant_type", "only client_credentials is supported")
        scopes = (entry["scope"] or SCOPE).split()
        if any(s != SCOPE for s in scopes):
            return error(400, "invalid_scope", f"the only scope is {SCOPE!r}")
        resource = entry["resource"]
        if resource is not None and resource.rstrip("/") != self.resource:
            return error(400, "invalid_target", f"the only resource is {self.resource}")
        token = self.issue(scopes, resource)
        entry["granted"] = True
        state.record_token_request(entry)
        return JSONResponse(
            {"access_token": token, "token_type": "Bearer", "expires_in": self.ttl, "scope": " ".join(scopes)},
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )


def build(state: State, oauth: OAuth | None = None) -> MCPServer:
    if oauth is None:
        server = MCPServer("baton-test-mcp", version="1.0.0", log_level="WARNING")
    else:
        server = MCPServer(
            "baton-test-mcp", version="1.0.0", log_level="WARNING", token_verifier=oauth, auth=oauth.settings()
        )
        # The SDK serves the path-inserted RFC 9728 document and names it in its 401s;
        # clients that try the root form first find the same document there.
        resource_metadata = ProtectedResourceMetadataHandler(
            ProtectedResourceMetadata(
                resource=oauth.resource, authorization_servers=[oauth.issuer], scopes_supported=[SCOPE]
            )
        )
        server.custom_route("/.well-known/oauth-protected-resource", methods=["GET"])(resource_metadata.handle)

        @server.custom_route("/.well-known/oauth-authorization-server/auth", methods=["GET"])
        async def authorization_server_metadata(request: Request) -> Response:
            return JSONResponse(oauth.authorization_server_metadata())

        @server.custom_route("/auth/token", methods=["POST"])
        async def token(request: Request) -> Response:
            return await oauth.token(request, state)

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

    async def ask_client(what: str, ctx: Context) -> str:
        """Asks the client something (`ping` or `roots`) on the call's stream first, and
        says how the client answered."""
        with state.execution(ctx, "ask_client"):
            request, result = {
                "ping": (types.PingRequest(), types.EmptyResult),
                "roots": (types.ListRootsRequest(), types.ListRootsResult),
            }[what]
            related = ServerMessageMetadata(related_request_id=ctx.request_id)
            try:
                await ctx.session.send_request(
                    request, result, request_read_timeout_seconds=5, metadata=related
                )
            except NoBackChannelError:
                return "no back channel"
            except MCPError as e:
                return f"refused {e.error.code}"
            return "answered"

    async def extra(ctx: Context) -> str:
        """A tool that only the second variant has."""
        with state.execution(ctx, "extra"):
            return "extra"

    # Plain text results (no structuredContent) except `increment`'s.
    server.add_tool(increment, annotations=READ_ONLY)
    server.add_tool(slow, structured_output=False, annotations=READ_ONLY)
    server.add_tool(count_to, structured_output=False)
    server.add_tool(ask_client, structured_output=False, annotations=READ_ONLY)

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

    def __init__(self, app, bearer: str | None, handshake_only: bool, oauth: OAuth | None = None):
        self.app = app
        self.bearer = bearer
        self.handshake_only = handshake_only
        self.oauth = oauth
        self.in_flight: set[anyio.CancelScope] = set()

    def authenticated(self, headers: dict[str, str]) -> bool:
        """Whether the SDK's bearer check (oauth mode) lets the request through: if not,
        its 401 comes first, as from a server whose auth wraps the transport."""
        if self.oauth is None:
            return True
        authorization = headers.get("authorization", "")
        token = authorization[7:] if authorization[:7].lower() == "bearer " else None
        access = self.oauth.lookup(token)
        return access is not None and SCOPE in access.scopes

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
        if (
            self.handshake_only
            and version is not None
            and version not in HANDSHAKE_PROTOCOL_VERSIONS
            and scope["path"].rstrip("/") == "/mcp"
            and self.authenticated(headers)
        ):
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
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]

    state = State(args.state)
    oauth = None
    if args.oauth is not None:
        client_id, _, client_secret = args.oauth.partition(":")
        oauth = OAuth(client_id, client_secret, args.token_ttl, f"http://127.0.0.1:{port}")
    server = build(state, oauth)
    app = server.streamable_http_app(
        json_response=args.mode == "json",
        stateless_http=args.mode == "stateless",
    )
    app = Gate(app, args.bearer, handshake_only=args.mode != "modern", oauth=oauth)
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
    parser.add_argument(
        "--oauth", metavar="CLIENT_ID:CLIENT_SECRET", help="require OAuth tokens of the client credentials grant"
    )
    parser.add_argument("--token-ttl", type=int, default=3600, metavar="SECONDS", help="the lifetime of a token")
    args = parser.parse_args()
    if args.oauth is not None and (args.bearer is not None or ":" not in args.oauth):
        parser.error("--oauth takes CLIENT_ID:CLIENT_SECRET and excludes --bearer")
    anyio.run(serve, args)


if __name__ == "__main__":
    main()
