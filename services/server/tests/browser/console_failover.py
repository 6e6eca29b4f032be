"""A run's page in the console across SIGTERM of the replica it streams from.

Run by services/server/tests/cluster/console.rs with the python of scripts/browser. Two
team-tier replicas stand behind one address (a proxy that sends each connection to the
first replica that accepts it), as behind a load balancer. Environment:

  BATON            the proxy's base URL
  RUN              a run whose first turn is under way (its reply takes seconds)
  EMAIL, PASSWORD  an owner of the run's tenant
  PID              the process of the first replica, which this script stops with SIGTERM
  SHOTS            a directory for screenshots

The page follows the run; the first replica is stopped mid-turn; the page reconnects
through the proxy to the other, which adopts the run; a message posted from the page is
answered; the page then shows every event once, in order, and each message once.
"""

import os
import signal
import time

from playwright.sync_api import expect, sync_playwright
from support import check, launch, passed

BATON = os.environ["BATON"]
RUN = os.environ["RUN"]
WAIT = 30_000


def alive(pid):
    """Whether process `pid` runs (an exited one its parent has not reaped is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def main():
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{BATON}/console")
        page.get_by_label("Email").fill(os.environ["EMAIL"])
        page.get_by_label("Password").fill(os.environ["PASSWORD"])
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=WAIT)
        page.goto(f"{BATON}/console#/runs/{RUN}")
        expect(page.locator(".msg.user", has_text="first")).to_be_visible(timeout=WAIT)
        expect(page.locator(".status", has_text="running")).to_be_visible(timeout=WAIT)
        before = int(page.locator("#conversation").get_attribute("data-version"))

        os.kill(int(os.environ["PID"]), signal.SIGTERM)
        passed(f"the first replica was stopped mid-turn, the page at version {before}")
        expect(page.locator(".msg.assistant", has_text="one")).to_have_count(1, timeout=WAIT)
        passed("the turn's reply arrived after the replica stopped")

        # Once the first replica is gone, everything goes through the other.
        pid = int(os.environ["PID"])
        deadline = time.time() + 30
        while alive(pid) and time.time() < deadline:
            time.sleep(0.1)
        check(not alive(pid), "the first replica has exited")
        page.get_by_label("Message", exact=True).fill("second")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".msg.assistant", has_text="two")).to_have_count(1, timeout=WAIT)
        expect(page.locator(".status", has_text="waiting")).to_be_visible(timeout=WAIT)

        stored = page.evaluate(
            """async (run) => (await (await fetch(`/v1/runs/${run}/events?limit=500`)).json()).events""",
            RUN,
        )
        # Events after the last reply (the turn's settling) may still be arriving.
        last = stored[-1]["version"]
        deadline = time.time() + 10
        while int(page.locator("#conversation").get_attribute("data-version")) < last and time.time() < deadline:
            time.sleep(0.1)
        shown = int(page.locator("#conversation").get_attribute("data-version"))
        count = int(page.locator("#conversation").get_attribute("data-events"))
        versions = [e["version"] for e in stored]
        check(versions == list(range(1, last + 1)), f"the run's stream has {last} events without a gap")
        check(shown == last and count == last, f"the page showed each of them once, in order ({count} of {last})")
        writers = sorted({e["meta"]["replica"].split("/")[0] for e in stored if e["meta"].get("replica")})
        check(len(writers) == 2, f"both replicas wrote the run's events ({writers})")
        expect(page.locator(".msg.user")).to_have_count(2)
        expect(page.locator(".msg.assistant")).to_have_count(2)
        passed("each message is shown once")
        check(errors == [], f"no script errors ({errors})")
        page.screenshot(path=os.path.join(os.environ["SHOTS"], "console-after-failover.png"), full_page=True)
        browser.close()
    print("console_failover.py: ok", flush=True)


if __name__ == "__main__":
    main()
