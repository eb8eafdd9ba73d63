"""The operator console in a real browser against the real binary: sign in,
make a key and read its secret once, spend with it through the official
OpenAI SDK and watch the spend appear without reloading, refund part of
it, disable the key (the SDK is refused), rotate it; and no error in the
browser's console, nor any markup from the data run as code. Keys load a
page of 100 at a time; the search box asks the server, so it finds a key
among thousands that no loaded page holds, pages on within its answer,
and shows only the answer to what was typed last."""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import CONFIG_KEY_ID

CHAT_MODEL = "gpt-4o"
# The console refreshes every 3 s; a change shows within two refreshes.
WAIT_SECS = 10
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=window.pwned=1>"


def usd(micros: int) -> str:
    """µUSD as the console shows it: at least 2 decimals, at most 6."""
    whole, fraction = divmod(abs(micros), 1_000_000)
    digits = str(fraction).zfill(6).rstrip("0").ljust(2, "0")
    return f"{'-' if micros < 0 else ''}${whole}.{digits}"


def row_of(driver, key_id: str):
    return driver.find_element(By.CSS_SELECTOR, f'#keys-body tr[data-id="{key_id}"]')


def cell_text(driver, key_id: str, css: str) -> str:
    try:
        return row_of(driver, key_id).find_element(By.CSS_SELECTOR, css).text
    except Exception:
        return ""


def until(driver, condition, message: str):
    return WebDriverWait(driver, WAIT_SECS, poll_frequency=0.2).until(condition, message)


def shown_ids(driver) -> list[str]:
    """The ids in the keys table, read in one step (rows are replaced as
    answers land)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#keys-body tr'), (row) => row.dataset.id)"
    )


def search(driver, text: str) -> None:
    box = driver.find_element(By.ID, "key-search")
    box.clear()
    box.send_keys(text)
    if not text:
        # Clearing sends no key press: say it was typed.
        driver.execute_script("document.getElementById('key-search').dispatchEvent(new Event('input'))")


def settled(driver) -> bool:
    """The last search typed has its answer shown."""
    return driver.find_element(By.ID, "keys").get_attribute("aria-busy") == "false"


def spent_micros(gateway, key_id: str) -> int:
    status, key = gateway.admin("GET", f"/admin/v1/keys/{key_id}")
    assert status == 200, key
    return key["budget"]["spent_usd_micros"]


def sdk(gateway, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=secret, max_retries=0, timeout=30)


def test_the_console_makes_watches_refunds_and_disables_a_key(gateway, driver, screenshots):
    # A key whose metadata holds markup: the page must show it as text.
    status, made = gateway.admin(
        "POST", "/admin/v1/keys", {"id": "hostile", "cap_usd": "1.00", "period": "day", "metadata": {"x": HOSTILE}}
    )
    assert status == 201, made

    driver.get(f"{gateway.url}/admin/")
    until(driver, seen.visibility_of_element_located((By.ID, "sign-in-form")), "no sign-in form")
    driver.save_screenshot(str(screenshots / "01-sign-in.png"))
    driver.find_element(By.ID, "admin-key").send_keys(gateway.admin_key)
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button[type=submit]").click()
    until(driver, lambda d: cell_text(d, CONFIG_KEY_ID, "td.id") == CONFIG_KEY_ID, "the keys table did not load")
    assert cell_text(driver, CONFIG_KEY_ID, "td:nth-child(3)") == "config"
    # Kept for the tab only.
    assert driver.execute_script("return sessionStorage.getItem('tollgate.adminKey')") == gateway.admin_key
    assert driver.execute_script("return localStorage.length") == 0

    hostile = row_of(driver, "hostile").find_element(By.CSS_SELECTOR, "td.id")
    assert HOSTILE in hostile.get_attribute("title")
    assert driver.execute_script("return window.pwned === undefined")
    assert len(driver.find_elements(By.TAG_NAME, "script")) == 1
    assert driver.find_elements(By.CSS_SELECTOR, "#keys-body img") == []

    # Make a key; its secret is shown once.
    key_id = f"console-{secrets.token_hex(4)}"
    driver.find_element(By.CSS_SELECTOR, "#create-key summary").click()
    form = driver.find_element(By.ID, "create-key-form")
    form.find_element(By.NAME, "id").send_keys(key_id)
    form.find_element(By.NAME, "org").send_keys("acme")
    form.find_element(By.NAME, "cap_usd").send_keys("0.05")
    Select(form.find_element(By.NAME, "period")).select_by_visible_text("total")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(driver, seen.visibility_of_element_located((By.ID, "secret-box")), "no secret shown")
    secret = driver.find_element(By.ID, "secret-value").text
    assert secret.startswith("tg-") and len(secret) == 67, secret
    driver.find_element(By.ID, "secret-copy").click()
    until(driver, lambda d: cell_text(d, key_id, "td:nth-child(5)") == "total", "the new key is not listed")
    assert cell_text(driver, key_id, "td.budget .remaining") == "$0.05 left of $0.05"
    driver.save_screenshot(str(screenshots / "02-key-made.png"))
    driver.find_element(By.ID, "secret-dismiss").click()
    assert driver.find_element(By.ID, "secret-value").text == ""

    # Spend with it; the table shows it without a reload.
    client = sdk(gateway, secret)
    # About $0.015 of a $0.05 cap: a bar one can see.
    completion = client.chat.completions.create(
        model=CHAT_MODEL,
        max_tokens=2000,
        messages=[{"role": "user", "content": "Name a colour. mock:tokens=1500"}],
    )
    assert completion.usage.completion_tokens == 1500
    spent = spent_micros(gateway, key_id)
    assert spent > 0
    until(
        driver,
        lambda d: cell_text(d, key_id, "td.budget .spent") == f"{usd(spent)} spent",
        f"the keys table never showed {usd(spent)} spent",
    )
    until(
        driver,
        lambda d: CHAT_MODEL in d.find_element(By.ID, "chart-model").text,
        "the spend-by-model chart does not show the call",
    )
    driver.save_screenshot(str(screenshots / "03-spend.png"))
    driver.find_element(By.ID, "spend").screenshot(str(screenshots / "04-spend-charts.png"))

    # Refund part of it.
    refund = spent // 2
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.refund").click()
    until(driver, seen.visibility_of_element_located((By.ID, "dialog")), "no refund dialog")
    driver.find_element(By.ID, "dialog-amount").send_keys(f"{refund // 1_000_000}.{refund % 1_000_000:06d}")
    driver.find_element(By.ID, "dialog-note").send_keys("browser test refund")
    driver.save_screenshot(str(screenshots / "05-refund.png"))
    driver.find_element(By.ID, "dialog-ok").click()
    until(driver, seen.invisibility_of_element_located((By.ID, "dialog")), "the refund dialog stayed open")
    assert spent_micros(gateway, key_id) == spent - refund
    until(
        driver,
        lambda d: cell_text(d, key_id, "td.budget .spent") == f"{usd(spent - refund)} spent",
        "the refund does not show",
    )

    # Change its cap.
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.cap").click()
    until(driver, seen.visibility_of_element_located((By.ID, "dialog")), "no cap dialog")
    amount = driver.find_element(By.ID, "dialog-amount")
    amount.clear()
    amount.send_keys("3.75")
    driver.find_element(By.ID, "dialog-ok").click()
    until(driver, lambda d: "of $3.75" in cell_text(d, key_id, "td.budget .remaining"), "the new cap does not show")

    # Disable it: the SDK is refused.
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.toggle").click()
    until(driver, lambda d: cell_text(d, key_id, "td.state") == "disabled", "the key does not show disabled")
    assert row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.toggle").text == "Enable"
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=CHAT_MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    driver.save_screenshot(str(screenshots / "06-disabled.png"))

    # Enable it and rotate it: the old secret is refused, the new one served.
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.toggle").click()
    until(driver, lambda d: cell_text(d, key_id, "td.state") == "active", "the key does not show active")
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.rotate").click()
    until(driver, seen.alert_is_present(), "no confirmation before a rotation").accept()
    until(driver, lambda d: d.find_element(By.ID, "secret-value").text not in ("", secret), "no new secret")
    rotated = driver.find_element(By.ID, "secret-value").text
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=CHAT_MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    served = sdk(gateway, rotated).chat.completions.create(
        model=CHAT_MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert served.usage.completion_tokens > 0

    # The search box finds keys by id prefix.
    search(driver, "console-")
    until(driver, lambda d: shown_ids(d) == [key_id], "the search did not find the key")
    # A prefix no id could start with: the API's reason, no rows.
    search(driver, "console key")
    until(driver, lambda d: "prefix must be" in d.find_element(By.ID, "keys-count").text, "no reason shown")
    assert shown_ids(driver) == []

    # A config key's actions are off: the API would refuse them.
    search(driver, "")
    until(driver, lambda d: cell_text(d, CONFIG_KEY_ID, "td.id") == CONFIG_KEY_ID, "the search did not clear")
    assert not row_of(driver, CONFIG_KEY_ID).find_element(By.CSS_SELECTOR, "button.toggle").is_enabled()

    # The browser logs the refused search's 400 itself; nothing else.
    errors = [
        entry
        for entry in driver.get_log("browser")
        if entry["level"] in ("SEVERE", "ERROR") and "prefix=console+key" not in entry["message"]
    ]
    assert errors == [], errors


def test_a_refused_admin_key_returns_to_the_sign_in_form(gateway, driver):
    driver.get(f"{gateway.url}/admin/")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    until(driver, seen.visibility_of_element_located((By.ID, "sign-in-form")), "no sign-in form")
    driver.find_element(By.ID, "admin-key").send_keys("tg-not-the-admin-key")
    driver.find_element(By.CSS_SELECTOR, "#sign-in-form button[type=submit]").click()
    until(driver, seen.visibility_of_element_located((By.ID, "sign-in-error")), "no sign-in error")
    assert "refused" in driver.find_element(By.ID, "sign-in-error").text
    assert driver.execute_script("return sessionStorage.getItem('tollgate.adminKey')") is None
    # The browser logs the 401 itself; nothing else.
    errors = [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "401" not in entry["message"]
    ]
    assert errors == [], errors


def test_keys_and_orgs_show_their_rate_limits_and_each_model_groups_money(gateway, driver, screenshots):
    key_id = f"limits-{secrets.token_hex(4)}"
    status, made = gateway.admin(
        "POST",
        "/admin/v1/keys",
        {
            "id": key_id,
            "org": "acme",
            "cap_usd": "1.00",
            "period": "day",
            "rpm": 60,
            "tpm": 100000,
            "model_caps": [
                {"name": "fours", "models": [f"{CHAT_MODEL}*"], "cap_usd": "0.50", "period": "day", "rpm": 10},
                {"name": "claude", "models": ["claude-*"], "cap_usd": "0.25", "period": "week"},
                {"name": "minis", "models": ["gpt-4o-mini"], "tpm": 5000},
            ],
        },
    )
    assert status == 201, made
    org_id = f"limits-org-{secrets.token_hex(4)}"
    status, org = gateway.admin(
        "POST",
        "/admin/v1/orgs",
        {
            "id": org_id,
            "cap_usd": "100.00",
            "period": "month",
            "tpm": 2000000,
            "model_caps": [{"name": "<b>bold</b>", "models": ["o3*"], "cap_usd": "9.00", "period": "month"}],
        },
    )
    # A group's name is held to an id's rule: markup is refused.
    assert status == 400 and org["error"]["param"] == "model_caps[0].name", org
    status, org = gateway.admin(
        "POST",
        "/admin/v1/orgs",
        {
            "id": org_id,
            "cap_usd": "100.00",
            "period": "month",
            "tpm": 2000000,
            "model_caps": [{"name": "reasoning", "models": ["o3*"], "cap_usd": "9.00", "period": "month"}],
        },
    )
    assert status == 201, org

    driver.get(f"{gateway.url}/admin/")
    driver.execute_script(f"sessionStorage.setItem('tollgate.adminKey', {gateway.admin_key!r})")
    driver.refresh()

    def group(name: str, css: str) -> str:
        return cell_text(driver, key_id, f'td.limits .group[data-group="{name}"] {css}')

    until(driver, lambda d: cell_text(d, key_id, "td.limits .rates") == "60 rpm · 100000 tpm", "no rate limits shown")
    assert group("fours", ".group-name") == "fours"
    assert group("fours", ".rates") == "10 rpm"
    assert group("fours", ".remaining") == "$0.50 left of $0.50/day"
    assert group("claude", ".remaining") == "$0.25 left of $0.25/week"
    assert group("minis", ".rates") == "5000 tpm"
    assert group("minis", ".remaining") == ""
    models = row_of(driver, key_id).find_element(By.CSS_SELECTOR, 'td.limits .group[data-group="fours"]')
    assert models.get_attribute("title") == f"models: {CHAT_MODEL}*"

    # A call to a model of the group: the group shows what the key spent.
    client = sdk(gateway, made["secret"])
    client.chat.completions.create(
        model=CHAT_MODEL,
        max_tokens=200,
        messages=[{"role": "user", "content": "Name a colour. mock:tokens=100"}],
    )
    spent = spent_micros(gateway, key_id)
    assert spent > 0
    until(driver, lambda d: group("fours", ".spent") == f"{usd(spent)} spent", "the group's spend is not shown")
    assert group("fours", ".remaining") == f"{usd(500_000 - spent)} left of $0.50/day"
    assert group("claude", ".spent") == "$0.00 spent"

    org_row = f'#orgs-body tr[data-id="{org_id}"] td.limits'
    until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, org_row), "the org is not listed")
    cell = driver.find_element(By.CSS_SELECTOR, org_row)
    assert cell.find_element(By.CSS_SELECTOR, ".rates").text == "2000000 tpm"
    assert cell.find_element(By.CSS_SELECTOR, '.group[data-group="reasoning"] .remaining').text == (
        "$9.00 left of $9.00/month"
    )
    driver.save_screenshot(str(screenshots / "10-limits.png"))
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors


def test_a_key_shows_its_customer_template_and_lists_its_customers(gateway, driver, screenshots):
    key_id = f"customers-{secrets.token_hex(4)}"
    status, made = gateway.admin(
        "POST",
        "/admin/v1/keys",
        {
            "id": key_id,
            "cap_usd": "1.00",
            "period": "day",
            "customer_cap_usd": "0.25",
            "customer_period": "day",
            "customer_rpm": 100,
            "customer_from": "body",
        },
    )
    assert status == 201, made
    client = sdk(gateway, made["secret"])
    for customer in ("c1@example.com", "c2"):
        client.chat.completions.create(
            model=CHAT_MODEL,
            max_tokens=50,
            messages=[{"role": "user", "content": "Name a colour. mock:tokens=20"}],
            extra_headers={"x-tollgate-customer": customer},
        )

    driver.get(f"{gateway.url}/admin/")
    driver.execute_script(f"sessionStorage.setItem('tollgate.adminKey', {gateway.admin_key!r})")
    driver.refresh()
    until(
        driver,
        lambda d: cell_text(d, key_id, "td.limits .customer-template")
        == "each customer: $0.25/day · 100 rpm · from body",
        "no customer template shown",
    )
    button = row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.customers")
    assert button.text == "Customers"
    button.click()
    detail = f'#keys-body tr.customers-row[data-key="{key_id}"]'

    def customer_cell(customer: str, css: str) -> str:
        try:
            return driver.find_element(By.CSS_SELECTOR, f'{detail} tr[data-customer="{customer}"] td.{css}').text
        except Exception:
            return ""

    until(driver, lambda d: customer_cell("c2", "id") == "c2", "the key's customers are not listed")
    status, listed = gateway.admin("GET", f"/admin/v1/customers?key={key_id}")
    assert status == 200, listed
    assert [c["id"] for c in listed["customers"]] == ["c1@example.com", "c2"]
    for customer in listed["customers"]:
        budget = customer["budget"]
        assert budget["spent_usd_micros"] > 0, customer
        until(
            driver,
            lambda d: customer_cell(customer["id"], "spent") == usd(budget["spent_usd_micros"]),
            f"{customer['id']}'s spend is not shown",
        )
        assert customer_cell(customer["id"], "remaining") == usd(budget["remaining_usd_micros"])
        assert customer_cell(customer["id"], "cap") == "$0.25/day"
        assert customer_cell(customer["id"], "last-call") != ""
    assert row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.customers").text == "Hide customers"
    driver.save_screenshot(str(screenshots / "11-customers.png"))
    row_of(driver, key_id).find_element(By.CSS_SELECTOR, "button.customers").click()
    until(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, detail), "the customers stay open")
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors


def test_keys_load_a_page_at_a_time_and_the_search_pages_too(gateway, driver):
    for number in range(120):
        body = {"id": f"page-{number:03d}", "cap_usd": "1.00", "period": "day"}
        status, made = gateway.admin("POST", "/admin/v1/keys", body)
        assert status == 201, made
    driver.get(f"{gateway.url}/admin/")
    driver.execute_script(f"sessionStorage.setItem('tollgate.adminKey', {gateway.admin_key!r})")
    driver.refresh()
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#keys-body tr")) == 100, "not one page of 100 keys")
    assert "more on the server" in driver.find_element(By.ID, "keys-count").text
    total = len(gateway.admin("GET", "/admin/v1/keys?limit=1000")[1]["keys"])
    driver.find_element(By.ID, "keys-more").click()
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#keys-body tr")) == total, "the next page did not load")
    assert not driver.find_element(By.ID, "keys-more").is_displayed()
    # A refresh keeps every page loaded.
    stamp = driver.find_element(By.ID, "status").text
    until(driver, lambda d: d.find_element(By.ID, "status").text != stamp, "no refresh")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#keys-body tr")) == total

    search(driver, "page-11")
    wanted = [f"page-11{digit}" for digit in range(10)]
    until(driver, lambda d: shown_ids(d) == wanted, "the search did not find page-110 to page-119")
    assert not driver.find_element(By.ID, "keys-more").is_displayed()
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors


# Enough that the keys of a search lie far past the first page, and quick to
# make: the admin API takes them concurrently.
MANY_KEYS = 5000
MAKERS = 16


def test_a_search_among_thousands_of_keys_asks_the_server_and_pages_within_it(gateway, driver):
    def make(number: int) -> None:
        body = {"id": f"bulk-{number:05d}", "cap_usd": "1.00", "period": "day"}
        status, made = gateway.admin("POST", "/admin/v1/keys", body)
        assert status == 201, made

    started = time.monotonic()
    with ThreadPoolExecutor(MAKERS) as pool:
        list(pool.map(make, range(MANY_KEYS)))
    print(f"made {MANY_KEYS} keys in {time.monotonic() - started:.1f} s")

    driver.get(f"{gateway.url}/admin/")
    driver.execute_script(f"sessionStorage.setItem('tollgate.adminKey', {gateway.admin_key!r})")
    driver.refresh()
    until(driver, lambda d: len(shown_ids(d)) == 100, "not one page of 100 keys")
    first_page = shown_ids(driver)
    target = f"bulk-{MANY_KEYS - 7:05d}"
    assert target not in first_page

    # A key no loaded page holds is found by the server.
    search(driver, target)
    until(driver, lambda d: settled(d) and shown_ids(d) == [target], f"the search did not find {target}")
    assert driver.find_element(By.ID, "keys-count").text == f"1 key starting with “{target}” loaded"

    # Paging goes on within the search: 1000 keys start with "bulk-01".
    search(driver, "bulk-01")
    in_order = [f"bulk-01{n:03d}" for n in range(1000)]
    until(driver, lambda d: settled(d) and shown_ids(d) == in_order[:100], "not the search's first page")
    assert "more on the server" in driver.find_element(By.ID, "keys-count").text
    driver.find_element(By.ID, "keys-more").click()
    until(driver, lambda d: shown_ids(d) == in_order[:200], "the search's next page did not load")
    # A refresh keeps the search and its pages.
    stamp = driver.find_element(By.ID, "status").text
    until(driver, lambda d: d.find_element(By.ID, "status").text != stamp, "no refresh")
    assert shown_ids(driver) == in_order[:200]

    # Answers may land out of order: only the one to what was typed last is
    # shown. The answer to "bulk-00" is held back past the one to "bulk-001".
    driver.execute_script(
        """
        const fetchNow = window.fetch.bind(window);
        window.fetch = (url, init) => {
          const answer = fetchNow(url, init);
          if (!/prefix=bulk-00(&|$)/.test(String(url))) return answer;
          window.heldBack = (window.heldBack || 0) + 1;
          return answer.then((response) => new Promise((done) => setTimeout(() => done(response), 1500)));
        };
        """
    )
    search(driver, "bulk-00")
    until(driver, lambda d: d.execute_script("return window.heldBack >= 1"), "the first search was not sent")
    driver.find_element(By.ID, "key-search").send_keys("1")
    wanted = [f"bulk-001{n:02d}" for n in range(100)]
    until(driver, lambda d: settled(d) and shown_ids(d) == wanted, "the latest search is not shown")
    time.sleep(2)
    assert shown_ids(driver) == wanted, "a stale answer replaced the latest"
    assert driver.find_element(By.ID, "key-search").get_attribute("value") == "bulk-001"

    # Nothing found says so.
    search(driver, "bulk-9")
    until(driver, lambda d: settled(d) and shown_ids(d) == [], "keys shown for a search that finds none")
    assert driver.find_element(By.ID, "keys-count").text == "no key starting with “bulk-9”"

    errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
