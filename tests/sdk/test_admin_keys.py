"""A key made through the admin API is an ordinary key to the official SDKs:
served at once, charged its usage, capped, and refused once disabled."""

from __future__ import annotations

import anthropic
import openai
import pytest

from support import SpendMeter, admin_call, read_budget

CHAT_MODEL = "gpt-4o-mini"
MESSAGES_MODEL = "claude-haiku-4-5"


def admin(gateway, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    return admin_call(gateway.url, gateway.admin_key, method, path, body)


def ask(words: int) -> list[dict]:
    return [{"role": "user", "content": f"Name a few colours, please. mock:tokens={words}"}]


def test_a_key_made_through_the_api_works_with_both_sdks(gateway, openai_for, anthropic_for, prices):
    status, made = admin(gateway, "POST", "/admin/v1/keys", {"org": "sdk", "cap_usd": "0.50", "period": "total"})
    assert status == 201, made
    secret = made["secret"]
    key_id = made["key"]["id"]
    assert made["key"]["source"] == "api"
    meter = SpendMeter(gateway.url, secret)

    completion = openai_for(secret).chat.completions.create(model=CHAT_MODEL, messages=ask(6))
    assert completion.usage.completion_tokens == 6
    meter.assert_charged(prices.chat_cost(CHAT_MODEL, completion.usage))

    meter.restart()
    message = anthropic_for(secret).messages.create(model=MESSAGES_MODEL, max_tokens=64, messages=ask(5))
    assert message.usage.output_tokens == 5
    after = meter.assert_charged(prices.messages_cost(MESSAGES_MODEL, message.usage))

    status, shown = admin(gateway, "GET", f"/admin/v1/keys/{key_id}")
    assert status == 200, shown
    assert shown["budget"]["spent_usd_micros"] == after.key.spent
    assert read_budget(gateway.url, secret).org.id == "sdk"

    # Disabled: both SDKs get their authentication error, and nothing is charged.
    status, _ = admin(gateway, "PATCH", f"/admin/v1/keys/{key_id}", {"disabled": True})
    assert status == 200
    with pytest.raises(openai.AuthenticationError):
        openai_for(secret, max_retries=0).chat.completions.create(model=CHAT_MODEL, messages=ask(3))
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_for(secret, max_retries=0).messages.create(model=MESSAGES_MODEL, max_tokens=64, messages=ask(3))
    status, shown = admin(gateway, "GET", f"/admin/v1/keys/{key_id}")
    assert shown["budget"]["spent_usd_micros"] == after.key.spent

    status, _ = admin(gateway, "DELETE", f"/admin/v1/keys/{key_id}")
    assert status == 204


def test_a_cap_lowered_through_the_api_stops_the_sdk_with_its_quota_error(gateway, openai_for):
    status, made = admin(gateway, "POST", "/admin/v1/keys", {"cap_usd": "1.00", "period": "day"})
    assert status == 201, made
    client = openai_for(made["secret"], max_retries=0)
    client.chat.completions.create(model=CHAT_MODEL, messages=ask(2))

    status, _ = admin(gateway, "PATCH", f"/admin/v1/keys/{made['key']['id']}", {"cap_usd": "0.000001"})
    assert status == 200
    with pytest.raises(openai.APIStatusError) as denied:
        client.chat.completions.create(model=CHAT_MODEL, messages=ask(2))
    assert denied.value.status_code == 402
    assert denied.value.code == "budget_exceeded"
