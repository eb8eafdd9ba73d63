"""Errors as the SDKs see them: the right exception class, the caller's API
shape, no retry of a budget denial, and never a charge."""

from __future__ import annotations

import anthropic
import openai
import pytest

OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-haiku-4-5"
SECONDS_PER_DAY = 86_400


def openai_messages(text: str = "Hello there.") -> list[dict]:
    return [{"role": "user", "content": text}]


def anthropic_messages(text: str = "Hello there.") -> list[dict]:
    return [{"role": "user", "content": text}]


def error_object(err) -> dict:
    """The `error` object of an error body, whichever way the SDK kept it."""
    body = err.body
    assert isinstance(body, dict), f"error body is not JSON: {body!r}"
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


# === authentication and routing ===


def test_openai_wrong_key_is_an_authentication_error(openai_for, meter, attempts):
    client = openai_for("tg-not-a-configured-key", attempts)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model=OPENAI_MODEL, messages=openai_messages())

    assert raised.value.status_code == 401
    assert error_object(raised.value).get("message")
    assert attempts.count == 1
    meter.assert_unchanged()


def test_anthropic_wrong_key_is_an_authentication_error(anthropic_for, meter, attempts):
    client = anthropic_for("tg-not-a-configured-key", attempts)
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=anthropic_messages())

    assert raised.value.status_code == 401
    assert raised.value.body["type"] == "error"
    assert attempts.count == 1
    meter.assert_unchanged()


def test_openai_unpriced_model_is_not_found(oai, meter):
    with pytest.raises(openai.NotFoundError) as raised:
        oai.chat.completions.create(model="gpt-tollgate-unpriced", messages=openai_messages())

    assert "gpt-tollgate-unpriced" in error_object(raised.value)["message"]
    meter.assert_unchanged()


def test_anthropic_unpriced_model_is_not_found(claude, meter):
    with pytest.raises(anthropic.NotFoundError) as raised:
        claude.messages.create(model="claude-tollgate-unpriced", max_tokens=64, messages=anthropic_messages())

    assert raised.value.body["type"] == "error"
    assert "claude-tollgate-unpriced" in error_object(raised.value)["message"]
    meter.assert_unchanged()


# === budget exhausted ===


def assert_budget_denial_headers(response) -> None:
    assert response.headers.get("x-should-retry") == "false"
    # The tiny key's period is a day: the denial says when it resets.
    retry_after = int(response.headers["retry-after"])
    assert 0 < retry_after <= SECONDS_PER_DAY


OPENAI_CALLS = {
    "chat": lambda client: client.chat.completions.create(model=OPENAI_MODEL, messages=openai_messages()),
    "chat-stream": lambda client: client.chat.completions.create(
        model=OPENAI_MODEL, messages=openai_messages(), stream=True
    ),
    "responses-stream": lambda client: client.responses.create(model=OPENAI_MODEL, input="Hello there.", stream=True),
}


@pytest.mark.parametrize("call", OPENAI_CALLS.values(), ids=OPENAI_CALLS.keys())
def test_openai_exhausted_budget_is_402_and_not_retried(call, gateway, openai_for, tiny_meter, attempts):
    client = openai_for(gateway.tiny_key, attempts)  # default max_retries: the SDK would retry a 429
    with pytest.raises(openai.APIStatusError) as raised:
        call(client)

    err = raised.value
    assert err.status_code == 402
    error = error_object(err)
    assert error["type"] == "insufficient_quota"
    assert error["code"] == "budget_exceeded"
    assert "tiny-key" in error["message"], "the message names the scope that denied"
    assert_budget_denial_headers(err.response)
    assert attempts.count == 1, f"the SDK retried a budget denial: {attempts.paths}"
    after = tiny_meter.assert_unchanged()
    assert after.org is None
    assert after.key.spent == 0


ANTHROPIC_CALLS = {
    "messages": lambda client: client.messages.create(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=anthropic_messages()
    ),
    "messages-stream": lambda client: client.messages.create(
        model=ANTHROPIC_MODEL, max_tokens=64, messages=anthropic_messages(), stream=True
    ),
}


@pytest.mark.parametrize("call", ANTHROPIC_CALLS.values(), ids=ANTHROPIC_CALLS.keys())
def test_anthropic_exhausted_budget_is_402_and_not_retried(call, gateway, anthropic_for, tiny_meter, attempts):
    client = anthropic_for(gateway.tiny_key, attempts)
    with pytest.raises(anthropic.APIStatusError) as raised:
        call(client)

    err = raised.value
    assert err.status_code == 402
    assert err.body["type"] == "error"
    assert error_object(err)["type"] == "billing_error"
    assert "tiny-key" in error_object(err)["message"]
    assert_budget_denial_headers(err.response)
    assert attempts.count == 1, f"the SDK retried a budget denial: {attempts.paths}"
    tiny_meter.assert_unchanged()


def test_anthropic_stream_helper_exhausted_budget(gateway, anthropic_for, tiny_meter, attempts):
    client = anthropic_for(gateway.tiny_key, attempts)
    with pytest.raises(anthropic.APIStatusError) as raised:
        with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64, messages=anthropic_messages()) as stream:
            stream.get_final_message()

    assert raised.value.status_code == 402
    assert attempts.count == 1
    tiny_meter.assert_unchanged()


# === upstream errors pass through ===


def test_openai_upstream_rate_limit_passes_through_uncharged(gateway, openai_for, meter, attempts):
    client = openai_for(gateway.sdk_key, attempts, max_retries=0)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model=OPENAI_MODEL, messages=openai_messages("Hi. mock:status=429"))

    assert raised.value.status_code == 429
    assert attempts.count == 1
    meter.assert_unchanged()


def test_openai_upstream_rate_limit_on_a_stream_passes_through_uncharged(gateway, openai_for, meter):
    client = openai_for(gateway.sdk_key, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model=OPENAI_MODEL, messages=openai_messages("Hi. mock:status=429"), stream=True
        )

    meter.assert_unchanged()


def test_anthropic_upstream_rate_limit_passes_through_uncharged(gateway, anthropic_for, meter, attempts):
    client = anthropic_for(gateway.sdk_key, attempts, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=64, messages=anthropic_messages("Hi. mock:status=429")
        )

    assert raised.value.status_code == 429
    assert attempts.count == 1
    meter.assert_unchanged()
