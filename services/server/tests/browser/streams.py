"""A real browser against a running Baton: stream tickets and the session cookie.

Run by services/server/tests/e2e/browser_streams.rs with the python of scripts/browser,
which has Playwright; the browser is Debian's chromium. Arguments come as environment:

  BATON       the API's base URL (http://127.0.0.1:<port>)
  KEY         an API key of the tenant (what an app's back end holds)
  RUN         an ended run of the tenant
  EMAIL, PASSWORD  a member of the tenant
  PAGE_PORT   a free loopback port for the other origin's pages; Baton allows the origin
              http://127.0.0.1:<PAGE_PORT> (`http.allowed_origins`), not http://localhost:<it>
  TICKET_SECS the server's `auth.stream_ticket_lifetime_secs`
  SHOTS       a directory for screenshots

Prints one `ok: …` line per check and exits non-zero at the first failure.
"""

import functools
import http.server
import os
import tempfile
import threading
import time
import urllib.parse

from playwright.sync_api import sync_playwright
from support import api as call
from support import check, launch, passed

BATON = os.environ["BATON"]
KEY = os.environ["KEY"]
RUN = os.environ["RUN"]
PAGE_PORT = int(os.environ["PAGE_PORT"])
TICKET_SECS = float(os.environ["TICKET_SECS"])
SHOTS = os.environ["SHOTS"]

# A plain page of another origin: it follows one run with EventSource, listening to each
# event type by name (frames are named, so `onmessage` would see none), and keeps what
# it saw in `window.seen` until the run's terminal event.
STREAM_PAGE = """<!doctype html>
<meta charset="utf-8"><title>follow a run</title>
<pre id="log"></pre>
<script>
const TYPES = ["run.created", "message.appended", "turn.requested", "turn.started",
  "model.completed", "checkpoint.saved", "turn.completed", "run.completed",
  "lease.acquired", "lease.released", "message.delta"];
window.seen = [];
window.done = false;
const url = new URLSearchParams(location.search).get("url");
const source = new EventSource(url);
for (const type of TYPES) {
  source.addEventListener(type, (frame) => {
    const event = JSON.parse(frame.data);
    window.seen.push([Number(frame.lastEventId), type, event.version]);
    document.getElementById("log").textContent += `${frame.lastEventId} ${type}\\n`;
    if (type === "run.completed") { window.done = true; source.close(); }
  });
}
source.onerror = () => { window.failed = true; source.close(); };
</script>
"""

# A page that posts a form to Baton's logout as soon as it loads: what a cross-site
# request forgery would do with a browser holding the session cookie.
FORM_PAGE = """<!doctype html>
<meta charset="utf-8"><title>win a prize</title>
<form id="f" method="post"></form>
<script>
const f = document.getElementById("f");
f.action = new URLSearchParams(location.search).get("target");
f.submit();
</script>
"""


def api(method, path, body=None):
    return call(BATON, KEY, method, path, body)


def serve_pages(directory):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", PAGE_PORT), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def status_of(page, url):
    """The status a fetch of `url` from `page` gets, as the page's script would see it."""
    return page.evaluate(
        """async (url) => {
             const r = await fetch(url, {headers: {accept: "text/event-stream"}});
             await r.text();
             return r.status;
           }""",
        url,
    )


def main():
    pages = tempfile.mkdtemp()
    with open(os.path.join(pages, "stream.html"), "w") as f:
        f.write(STREAM_PAGE)
    with open(os.path.join(pages, "form.html"), "w") as f:
        f.write(FORM_PAGE)
    server = serve_pages(pages)
    other = f"http://127.0.0.1:{PAGE_PORT}"
    stored = api("GET", f"/v1/runs/{RUN}/events?limit=500")["events"]
    expected = [(e["version"], e["type"]) for e in stored]

    with sync_playwright() as p:
        browser = launch(p)
        context = browser.new_context()
        page = context.new_page()

        # The app's back end asks for a ticket with its key; the page streams with it.
        ticket = api("POST", f"/v1/runs/{RUN}/stream-tickets")
        stream_url = BATON + ticket["url"]
        page.goto(f"{other}/stream.html?url={urllib.parse.quote(stream_url)}")
        page.wait_for_function("window.done || window.failed", timeout=10_000)
        seen = page.evaluate("window.seen")
        check(not page.evaluate("window.failed === true"), "the ticket's stream opened")
        check(
            [(v, t) for v, t, _ in seen] == expected,
            f"the page saw every event once, in order ({len(seen)} events)",
        )
        check(all(v == version for v, _, version in seen), "each frame's id is its version")
        page.screenshot(path=os.path.join(SHOTS, "stream-ticket-page.png"), full_page=True)

        check(status_of(page, stream_url) == 401, "a used ticket answers 401")
        late = BATON + api("POST", f"/v1/runs/{RUN}/stream-tickets")["url"]
        time.sleep(TICKET_SECS + 0.5)
        check(status_of(page, late) == 401, "an expired ticket answers 401")
        fresh = BATON + api("POST", f"/v1/runs/{RUN}/stream-tickets")["url"]
        check(status_of(page, fresh) == 200, "a fresh ticket opens the stream from the page")

        # A session kept in the browser's cookie, as a page of Baton's own origin gets it.
        login = context.request.post(
            f"{BATON}/v1/login",
            data={"email": os.environ["EMAIL"], "password": os.environ["PASSWORD"], "cookie": True},
        )
        check(login.status == 200 and login.json()["token"] is None, "a cookie login keeps the token from scripts")
        cookies = context.cookies(BATON)
        check(
            any(c["name"] == "__Host-baton_session" and c["httpOnly"] and c["sameSite"] == "Strict" for c in cookies),
            "the browser keeps the session cookie HttpOnly and SameSite=Strict",
        )
        check(context.request.get(f"{BATON}/v1/me").status == 200, "the cookie authenticates")

        # Forged logouts. From an allowed origin of the same site the cookie goes along
        # but the anti-CSRF header cannot, and that is the only refusal left for it
        # (`403 csrf_failed`; the API tests read the code). From another site neither
        # goes, and its origin is refused first. The form's answer replaces the page and
        # its body is a download the browser's tools cannot read, so its status is checked.
        cases = ((other, "no anti-CSRF header"), (f"http://localhost:{PAGE_PORT}", "another site"))
        for origin, why in cases:
            with page.expect_response(lambda r: r.url == f"{BATON}/v1/logout") as answer:
                page.goto(f"{origin}/form.html?target={urllib.parse.quote(BATON + '/v1/logout')}")
            check(answer.value.status == 403, f"a form posted from {origin} is refused: {why}")
        check(context.request.get(f"{BATON}/v1/me").status == 200, "the session outlived the forged logouts")

        browser.close()
    server.shutdown()
    print("streams.py: ok", flush=True)


if __name__ == "__main__":
    main()
