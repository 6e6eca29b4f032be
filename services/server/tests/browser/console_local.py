"""The console of the embedded tier without authentication: no login, the local owner.

Run by services/server/tests/e2e/console.rs with the python of scripts/browser against
`baton serve` as the README starts it. Environment: BATON (its base URL), AGENT (an
agent's id), SHOTS. Prints one `ok: …` line per check.
"""

import os

from playwright.sync_api import expect, sync_playwright
from support import check, launch, passed

BATON = os.environ["BATON"]
WAIT = 15_000


def main():
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{BATON}/")
        expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=WAIT)
        check(page.url.endswith("/console"), "the server's root leads to the console")
        check("local owner" in page.locator("#who").inner_text(), "no login: the page acts as the local owner")
        check(not page.get_by_role("button", name="Log out").is_visible(), "there is no session to end")
        # Keyboard only: the skip link, then the new run's form.
        page.keyboard.press("Tab")
        check(page.evaluate("document.activeElement.textContent") == "Skip to content", "the first Tab offers the skip link")
        page.get_by_label("Agent").focus()
        page.keyboard.press("Tab")
        page.keyboard.type("Hello from the keyboard")
        page.keyboard.press("Enter")
        page.wait_for_url("**/console#/runs/*")
        expect(page.locator(".msg.user", has_text="Hello from the keyboard")).to_be_visible(timeout=WAIT)
        expect(page.locator(".msg.assistant", has_text="Hi there")).to_have_count(1, timeout=WAIT)
        passed("a run started from the keyboard streams its reply")
        check(errors == [], f"no script errors ({errors})")
        page.screenshot(path=os.path.join(os.environ["SHOTS"], "console-local.png"), full_page=True)
        browser.close()
    print("console_local.py: ok", flush=True)


if __name__ == "__main__":
    main()
