"""The console in a real browser, as its users use it.

Run by services/server/tests/e2e/console.rs with the python of scripts/browser against a
`baton serve` child process (embedded tier, authentication on). Environment:

  BATON                 the server's base URL
  KEY                   an owner API key (to define the tools the agent uses)
  OWNER_EMAIL, VIEWER_EMAIL, PASSWORD  users of the tenant, an owner and a viewer
  SHOTS                 a directory for screenshots

An owner logs in, creates an agent, starts a run and watches its reply stream in,
approves a tool call and answers it, resolves an uncertain call, posts a message and
cancels the turn; a viewer sees no control that writes, and a write forced from its page
is refused. Prints one `ok: …` line per check; exits non-zero at the first failure.
"""

import http.server
import json
import os
import threading
import time

from playwright.sync_api import expect, sync_playwright
from support import api as call
from support import check, launch, passed

BATON = os.environ["BATON"]
KEY = os.environ["KEY"]
PASSWORD = os.environ["PASSWORD"]
SHOTS = os.environ["SHOTS"]
WAIT = 15_000


def api(method, path, body=None):
    return call(BATON, KEY, method, path, body)


class Slow(http.server.BaseHTTPRequestHandler):
    """A tool server that answers too late: a mutation sent to it ends `uncertain`."""

    calls = 0

    def do_POST(self):
        Slow.calls += 1
        time.sleep(3)
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")
        except OSError:
            pass

    def log_message(self, *args):
        pass


def log_in(page, email):
    page.goto(f"{BATON}/console")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=WAIT)


def open_view(page, link):
    """Follows a nav link and waits until its view is drawn.

    The console routes on `hashchange`, which fires after the click returns: a form
    filled at once could be the previous view's (Secrets and API keys both label a field
    "Name")."""
    page.locator("nav").get_by_role("link", name=link).click()
    expect(page.get_by_role("heading", level=1, name=link, exact=True)).to_be_visible(timeout=WAIT)


def receipt(page, state):
    return page.locator(f'#receipts .receipt[data-state="{state}"]')


def main():
    slow = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    ask = api("POST", "/v1/tools", {
        "name": "ask_team", "description": "Ask the team a question.", "effect": "read",
        "requires_approval": True,
        "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}},
        "kind": {"kind": "client"}})
    refund = api("POST", "/v1/tools", {
        "name": "issue_refund", "description": "Refund an order.", "effect": "mutation",
        "timeout_ms": 500, "input_schema": {"type": "object"},
        "kind": {"kind": "http", "url": f"http://127.0.0.1:{slow.server_port}/refund"}})

    with sync_playwright() as p:
        browser = launch(p)
        outside = []
        owner = browser.new_context(viewport={"width": 1280, "height": 860})
        page = owner.new_page()
        page.on("request", lambda r: r.url.startswith(BATON) or outside.append(r.url))
        console_errors = []
        # A refused request is logged by the browser itself (`Failed to load resource`):
        # those are expected here (the first `/v1/me` before logging in); anything else
        # is the console's script failing.
        page.on("console", lambda m: m.type == "error"
                and "Failed to load resource" not in m.text and console_errors.append(m.text))
        page.on("pageerror", lambda e: console_errors.append(str(e)))

        log_in(page, os.environ["OWNER_EMAIL"])
        passed("the owner logged in with email and password")
        check(page.context.cookies(BATON)[0]["httpOnly"], "the session is an HttpOnly cookie")

        # An agent, defined in the console.
        open_view(page, "Agents")
        page.get_by_label("Name").fill("helper")
        page.get_by_label("Definition").fill(json.dumps({
            "tools": [ask["id"], refund["id"]],
            "provider": {"kind": "scripted", "replies": [
                {"content": "Let me ask the team.", "delay_ms": 300,
                 "tool_calls": [{"name": "ask_team", "arguments": {"question": "Refund 7731?"}}]},
                {"tool_calls": [{"name": "issue_refund", "arguments": {"order": 7731}}]},
                {"content": "Refund 7731 is issued.", "delay_ms": 300},
                {"content": "never sent", "delay_ms": 60000},
            ]},
        }))
        page.get_by_role("button", name="Create agent").click()
        expect(page.locator('tr[data-name="helper"]')).to_be_visible(timeout=WAIT)
        passed("an agent was created in the console")

        # A run, started from the runs list.
        open_view(page, "Runs")
        page.get_by_label("Agent").select_option(label="helper")
        page.get_by_label("Message").fill("Please refund order 7731")
        page.get_by_role("button", name="Start run").click()
        page.wait_for_url("**/console#/runs/*")
        run = page.url.rsplit("/", 1)[1]

        approve = receipt(page, "awaiting_approval")
        expect(approve).to_be_visible(timeout=WAIT)
        check(int(page.locator("#conversation").get_attribute("data-deltas") or 0) > 0,
              "the reply's deltas streamed into the page")
        expect(page.locator(".msg.assistant", has_text="Let me ask the team.")).to_have_count(1)
        page.screenshot(path=os.path.join(SHOTS, "console-run-approval.png"), full_page=True)
        approve.get_by_role("button", name="Approve").click()
        client = receipt(page, "awaiting_client")
        expect(client).to_be_visible(timeout=WAIT)
        passed("the tool call was approved")
        client.get_by_label("Output of ask_team").fill("yes, refund it")
        client.get_by_role("button", name="Submit output").click()

        uncertain = receipt(page, "uncertain")
        expect(uncertain).to_be_visible(timeout=WAIT)
        check(Slow.calls == 1, "the refund was sent once and held uncertain")
        uncertain.get_by_label("Output of issue_refund").fill("refund 7731 issued by hand")
        uncertain.get_by_role("button", name="Complete").click()
        expect(page.locator(".msg.assistant", has_text="Refund 7731 is issued.")).to_have_count(1, timeout=WAIT)
        expect(page.locator(".status", has_text="waiting")).to_be_visible(timeout=WAIT)
        check(Slow.calls == 1, "the uncertain call was resolved without calling again")
        events = api("GET", f"/v1/runs/{run}/events?limit=500")["events"]
        shown = int(page.locator("#conversation").get_attribute("data-version"))
        check(shown == events[-1]["version"], "the page has followed the run to its last event")
        expect(page.locator(".msg.user")).to_have_count(1)
        passed("each message is shown once")
        page.screenshot(path=os.path.join(SHOTS, "console-run.png"), full_page=True)

        # A message starts a slow turn, which the owner cancels.
        page.get_by_label("Message", exact=True).fill("One more thing")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".status", has_text="running")).to_be_visible(timeout=WAIT)
        page.get_by_role("button", name="Cancel run").click()
        expect(page.locator(".status", has_text="cancelled")).to_be_visible(timeout=WAIT)
        check(api("GET", f"/v1/runs/{run}")["status"] == "cancelled", "the run was cancelled from the console")

        open_view(page, "Runs")
        expect(page.locator(f'tr[data-run="{run}"] .status', has_text="cancelled")).to_be_visible(timeout=WAIT)
        page.screenshot(path=os.path.join(SHOTS, "console-runs.png"), full_page=True)
        passed("the runs list shows the run's status")

        # The tenant's definitions and credentials, as an admin keeps them.
        open_view(page, "Agents")
        page.get_by_role("button", name="Edit helper").click()
        spec = json.loads(page.get_by_label("Definition").input_value())
        spec["instructions"] = "Be brief."
        page.get_by_label("Definition").fill(json.dumps(spec))
        page.get_by_role("button", name="Save new version").click()
        expect(page.locator('tr[data-name="helper"] td').nth(2)).to_have_text("2", timeout=WAIT)
        passed("an agent was changed in the console, as its version 2")

        open_view(page, "Tools")
        page.get_by_label("Name").fill("lookup")
        page.get_by_role("button", name="Create tool").click()
        expect(page.locator('tr[data-name="lookup"]')).to_be_visible(timeout=WAIT)
        passed("a tool was created in the console")

        open_view(page, "Secrets")
        page.get_by_label("Name").fill("shop_token")
        page.get_by_label("Value").fill("s3cret-value")
        page.get_by_role("button", name="Set secret").click()
        expect(page.locator('[data-secret="shop_token"]')).to_be_visible(timeout=WAIT)
        check("s3cret-value" not in page.content(), "a secret was set, and its value is not shown")

        open_view(page, "API keys")
        page.get_by_label("Name").fill("ci")
        page.get_by_label("Role").select_option("member")
        page.get_by_role("button", name="Create key").click()
        token = page.locator("#new-key").inner_text(timeout=WAIT)
        check(token.startswith("bk_"), "an API key was created and its token shown once")
        page.get_by_role("button", name="Revoke ci").click()
        expect(page.get_by_role("cell", name="revoked")).to_be_visible(timeout=WAIT)
        passed("the key was revoked")

        open_view(page, "Members")
        page.get_by_label("Email").fill("newcomer@example.com")
        page.get_by_role("button", name="Invite").click()
        expect(page.get_by_role("button", name="Revoke invitation of newcomer@example.com")).to_be_visible(timeout=WAIT)
        passed("a user was invited")
        expect(page.get_by_label(f"Role of {os.environ['VIEWER_EMAIL']}")).to_have_value("viewer")

        open_view(page, "Audit")
        for action in ("secret.put", "api_key.revoked", "member.invited"):
            expect(page.get_by_role("cell", name=action, exact=True).first).to_be_visible(timeout=WAIT)
        passed("the audit stream shows what was done")
        page.screenshot(path=os.path.join(SHOTS, "console-audit.png"), full_page=True)

        # A viewer sees no control that writes, and a forced write is refused.
        viewer = browser.new_context(viewport={"width": 390, "height": 844})  # a phone
        vpage = viewer.new_page()
        vpage.on("request", lambda r: r.url.startswith(BATON) or outside.append(r.url))
        stream_opens = []
        vpage.on("request", lambda r: "/events?" in r.url and stream_opens.append(r.url))
        log_in(vpage, os.environ["VIEWER_EMAIL"])
        # A member of two tenants picks the run's.
        vpage.get_by_label("Tenant").select_option(label="acme")
        expect(vpage.locator(f'tr[data-run="{run}"]')).to_be_visible(timeout=WAIT)
        check(vpage.get_by_role("button", name="Start run").count() == 0, "a viewer gets no start form")
        for name in ("Secrets", "API keys", "Members", "Audit"):
            check(not vpage.locator("nav").get_by_role("link", name=name).is_visible(), f"a viewer is offered no {name}")
        open_view(vpage, "Tools")
        expect(vpage.locator('tr[data-name="lookup"]')).to_be_visible(timeout=WAIT)
        check(vpage.get_by_role("button", name="Create tool").count() == 0
              and vpage.get_by_role("button", name="Edit lookup").count() == 0, "a viewer reads tools but may not change them")
        vpage.goto(f"{BATON}/console#/runs/{run}")
        expect(vpage.locator(".msg.user").first).to_be_visible(timeout=WAIT)
        passed("a member of two tenants follows a run's stream")
        time.sleep(2)
        check(len(stream_opens) <= 2, f"an ended run's stream is not opened again and again ({len(stream_opens)})")
        for name in ("Cancel run", "Send", "Approve", "Complete", "Skip"):
            check(vpage.get_by_role("button", name=name).count() == 0, f"a viewer sees no {name} button")
        vpage.screenshot(path=os.path.join(SHOTS, "console-run-viewer-phone.png"), full_page=True)
        forced = vpage.evaluate("""async (run) => {
            const me = await (await fetch("/v1/me")).json();
            const acme = me.tenants.find((t) => t.name === "acme").tenant_id;
            const r = await fetch(`/v1/runs/${run}/messages`, {method: "POST",
              headers: {"content-type": "application/json", "baton-csrf": me.csrf_token,
                        "baton-tenant": acme},
              body: JSON.stringify({content: "sneaky"})});
            return [r.status, (await r.json()).code];
        }""", run)
        check(forced == [403, "forbidden"], f"a viewer's forced write is refused ({forced})")
        vpage.get_by_role("button", name="Log out").click()
        expect(vpage.get_by_role("heading", name="Log in")).to_be_visible(timeout=WAIT)
        check(vpage.evaluate("fetch('/v1/me').then(r => r.status)") == 401, "after logging out the cookie opens nothing")

        check(outside == [], f"the console loaded nothing from elsewhere ({outside})")
        check(console_errors == [], f"no script errors ({console_errors})")
        browser.close()
    slow.shutdown()
    print("console.py: ok", flush=True)


if __name__ == "__main__":
    main()
