"""The dashboard page with a keyboard and a screen reader, in a real browser (headless Chromium
against a real `tally serve`): where the focus lands and what is said after each action.

- Signing in moves the focus to the new view's heading, not to the page's body.
- A new project's or a new key's one-time card is said (a live region) and focused (its key).
- Revoking a key says so, and leaves the focus on the keys' heading, not on the body. Each
  Revoke button is named with its key, Escape disarms an armed one, and the table's last column
  has a header.
- Saving the settings says "Settings saved."
- An unknown project is a view of its own: a heading and a title, as every other view.
"""

# ruff: noqa: F811
# (the fixtures tally, browser and watch come from test_site_owner, as in test_panels)

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_filters_page import pump
from test_site_owner import (  # noqa: F401 - fixtures: tally, browser, watch
    BROWSER_TESTS,
    DESKTOP,
    browser,
    new_project,
    tally,
    watch,
)

from conftest import token

pytestmark = BROWSER_TESTS

# How long an announcement or a focus may take, once its view is on screen.
SOON = 10
FAILED_LOAD = "Failed to load resource: the server responded with a status of {}"

# Where the focus is: the body, or the focused element's tag, id and text.
FOCUS = """() => {
  const a = document.activeElement;
  if (!a || a === document.body) return 'BODY';
  const words = (a.textContent || a.value || '').trim().slice(0, 40);
  return a.tagName + (a.id ? '#' + a.id : '') + ' ' + words;
}"""
# What the page's live regions say now.
SAID = """() => [...document.querySelectorAll('[role=alert],[role=status],[aria-live]')]
  .map(e => e.textContent.trim()).filter(Boolean)"""


def user_name() -> str:
    return f"a11y-{uuid.uuid4().hex[:8]}"


def said(page: Any, words: str) -> bool:
    return any(words in text for text in page.evaluate(SAID))


def focused(page: Any) -> str:
    result: str = page.evaluate(FOCUS)
    return result


def signed_in(browser: Any, watch: Any, tally: str, user: str, path: str = "/") -> Any:
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    page.goto(f"{tally}{path}#token={token(user)}")
    return page


def test_signing_in_moves_the_focus_to_the_new_views_heading(tally, browser, watch):
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    page.goto(tally + "/")
    page.get_by_role("heading", name="Sign in to Tally").wait_for()
    page.focus("#token-input")
    page.keyboard.type(token(user_name()))
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Projects", exact=True).wait_for()
    pump(page, lambda: focused(page) != "BODY", "the focus to land in the projects view", SOON)
    assert focused(page) == "H1 Projects"
    context.close()
    watch.assert_clean()


def test_a_new_project_and_a_new_key_are_said_and_focused(tally, browser, watch):
    page = signed_in(browser, watch, tally, user_name())
    page.get_by_text("No projects yet").wait_for()
    page.focus("#project-name")
    page.keyboard.type("Spoken site")
    page.keyboard.press("Enter")
    page.locator("[data-testid=new-key]").wait_for()
    pump(page, lambda: said(page, "Project created"), "the new project to be said", SOON)
    assert said(page, "shown only once")
    assert page.evaluate("document.activeElement.dataset.testid") == "api-key"

    # a key added on the Keys tab: the same
    page.locator("a.project-link").first.click()
    page.locator("#tab-keys").click()
    page.locator("#keys tbody tr").first.wait_for()
    page.focus("#key-label")
    page.keyboard.type("Staging")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Key added").wait_for()
    pump(page, lambda: said(page, "Key added"), "the new key to be said", SOON)
    assert page.evaluate("document.activeElement.dataset.testid") == "api-key"
    page.context.close()
    watch.assert_clean()


def add_key(page: Any, label: str) -> None:
    """Adds a key on the Keys tab, with the keyboard; waits for its row."""
    page.locator("#keys tbody tr").first.wait_for()
    rows = page.locator("#keys tbody tr").count()
    page.focus("#key-label")
    page.keyboard.type(label)
    page.keyboard.press("Enter")
    pump(page, lambda: page.locator("#keys tbody tr").count() == rows + 1, "the new key's row")


def test_the_keys_buttons_and_columns_are_named_and_escape_disarms(tally, browser, watch):
    user = user_name()
    project_id, _ = new_project(tally, user, "Named site")
    page = signed_in(browser, watch, tally, user, f"/?project={project_id}&tab=keys")
    add_key(page, "Staging")

    # the one-time card's two Copy buttons say what each copies; their text stays "Copy"
    card = page.locator("[data-testid=new-key]")
    shown = card.locator("button[data-copy]").evaluate_all(
        "bs => bs.map(b => [...b.childNodes].filter(n => !n.matches || !n.matches('.sr-only'))"
        ".map(n => n.textContent).join(''))"
    )
    assert shown == ["Copy", "Copy"]
    assert card.get_by_role("button", name="Copy API key", exact=True).count() == 1
    assert card.get_by_role("button", name="Copy snippet", exact=True).count() == 1

    # each Revoke button says which key it revokes; the actions column has a header
    names = page.locator("button[data-revoke]").evaluate_all(
        "bs => bs.map(b => [b.textContent, b.getAttribute('aria-label')])"
    )
    assert names == [["Revoke", "Revoke key Default"], ["Revoke", "Revoke key Staging"]]
    assert page.locator("#keys thead th").all_text_contents() == [
        "Label",
        "Key",
        "Created",
        "Last used",
        "Actions",
    ]
    assert page.locator("#keys thead th").last.locator(".sr-only").count() == 1
    assert page.get_by_role("rowheader", name="Staging", exact=True).count() == 1

    # armed, then Escape: back to Revoke, and nothing revoked
    revoke = page.locator("button[data-revoke]").last
    revoke.focus()
    page.keyboard.press("Enter")
    assert revoke.text_content() == "Confirm revoke"
    assert revoke.get_attribute("aria-label") == "Confirm revoke of key Staging"
    page.keyboard.press("Escape")
    assert revoke.text_content() == "Revoke"
    assert revoke.get_attribute("aria-label") == "Revoke key Staging"
    assert focused(page) == "BUTTON Revoke"
    page.wait_for_timeout(300)
    assert page.locator("#keys tbody tr").count() == 2
    page.context.close()
    watch.assert_clean()


def test_revoking_a_key_is_said_and_leaves_the_focus_on_the_keys_heading(tally, browser, watch):
    user = user_name()
    project_id, _ = new_project(tally, user, "Keyed site")
    page = signed_in(browser, watch, tally, user, f"/?project={project_id}&tab=keys")
    add_key(page, "Staging")
    revoke = page.locator("button[data-revoke]").last
    revoke.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    pump(page, lambda: page.locator("#keys tbody tr").count() == 1, "the revoked key's row to go")
    pump(page, lambda: said(page, "Key “Staging” revoked."), "the revoking to be said", SOON)
    pump(page, lambda: focused(page) != "BODY", "the focus to land", SOON)
    assert focused(page) == "H2#keys-title API keys"
    page.context.close()
    watch.assert_clean()


def test_saving_the_settings_is_said(tally, browser, watch):
    user = user_name()
    project_id, _ = new_project(tally, user, "Settled site")
    page = signed_in(browser, watch, tally, user, f"/?project={project_id}&tab=settings")
    page.fill("#settings-name", "Settled site renamed")
    page.focus("#settings-name")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Settled site renamed").wait_for()
    pump(page, lambda: said(page, "Settings saved."), "the save to be said", SOON)
    assert page.locator("#settings-status").get_by_text("Settings saved.").is_visible()
    assert focused(page) == "BUTTON#settings-save Save settings"
    page.context.close()
    watch.assert_clean()


@pytest.mark.parametrize("project", ["0" * 24, "garbage"])
def test_an_unknown_project_has_a_heading_and_a_title(tally, browser, watch, project):
    page = signed_in(browser, watch, tally, user_name(), f"/?project={project}")
    page.locator("#main section").wait_for()
    pump(page, lambda: "Loading" not in page.inner_text("#main"), "the project to be looked up")
    assert page.get_by_role("heading", name="Project not found", level=1).count() == 1
    assert page.title() == "Project not found · Tally"
    assert page.get_by_text("it belongs to another account").is_visible()
    page.context.close()
    watch.assert_clean(FAILED_LOAD.format(404))


def test_a_revoked_new_key_is_no_longer_offered_for_copying(tally, browser, watch):
    """A key added and then revoked kept its one-time card, with its snippet, offered for
    copying though every request with it is 401."""
    user = user_name()
    project_id, _ = new_project(tally, user, "Short-lived key")
    page = signed_in(browser, watch, tally, user, f"/?project={project_id}&tab=keys")
    add_key(page, "Temp")
    assert page.locator("[data-testid=new-key]").count() == 1
    revoke = page.get_by_role("button", name="Revoke key Temp")
    revoke.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    pump(page, lambda: said(page, "Key “Temp” revoked."), "the revoking to be said", SOON)
    assert page.locator("[data-testid=new-key]").count() == 0
    page.context.close()
    watch.assert_clean()
