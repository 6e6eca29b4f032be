"""What the browser scripts share: checks that print what held, Baton's API with a key,
and chromium as the tests launch it (Debian's, driven by Playwright)."""

import json
import os
import urllib.request


def check(cond, what):
    """Prints `ok: what` when `cond` holds; ends the script with `FAILED: what` when not."""
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def passed(what):
    """Prints `ok: what` for a step a Playwright `expect` just asserted."""
    print(f"ok: {what}", flush=True)


def api(base, key, method, path, body=None):
    """`method path` on Baton at `base` with the API key `key`; the answer's JSON."""
    req = urllib.request.Request(base + path, method=method)
    req.add_header("authorization", f"Bearer {key}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, data) as res:
        return json.loads(res.read() or b"null")


def launch(playwright):
    """Headless chromium (`CHROMIUM`, default /usr/bin/chromium), no network of its own."""
    return playwright.chromium.launch(
        executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"),
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    )
