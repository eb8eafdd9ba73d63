"""Rate limits as the SDKs meet them: a key with `rpm = 1` gets a 429 on
its second call of a minute, with `retry-after` to the minute's end; the
official OpenAI and Anthropic SDKs wait that long, retry once, and the call
goes through in the next minute, charged once. (A 402 is never retried:
test_errors.py.)"""

from __future__ import annotations

import threading
import time

from conftest import RPM_KEY_IDS, AttemptCounter

OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-haiku-4-5"


def openai_call(client):
    return client.chat.completions.with_raw_response.create(
        model=OPENAI_MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hello there."}]
    )


def anthropic_call(client):
    return client.messages.with_raw_response.create(
        model=ANTHROPIC_MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hello there."}]
    )


def wait_for_a_fresh_minute(margin_secs: float = 8.0) -> None:
    """The first call of each key must fall in the same minute as the
    refused one: start with at least `margin_secs` of a minute left."""
    into = time.time() % 60
    if into > 60 - margin_secs:
        time.sleep(60 - into + 0.5)


def test_sdks_retry_a_429_after_retry_after_and_then_succeed(gateway, openai_for, anthropic_for):
    openai_key, anthropic_key = (gateway.rpm_keys[key_id] for key_id in RPM_KEY_IDS)
    attempts = {"openai": AttemptCounter(), "anthropic": AttemptCounter()}
    clients = {
        "openai": (openai_for(openai_key, attempts["openai"], max_retries=2), openai_call),
        "anthropic": (anthropic_for(anthropic_key, attempts["anthropic"], max_retries=2), anthropic_call),
    }
    wait_for_a_fresh_minute()
    minute = int(time.time() // 60)
    # Each key's one request of this minute.
    for name, (client, call) in clients.items():
        first = call(client)
        assert first.http_response.status_code == 200
        assert first.headers["x-ratelimit-limit-requests"] == "1"
        assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert int(time.time() // 60) == minute, "the first calls straddled a minute"

    # The second: 429, waited out by the SDK (both at once, so the test
    # waits for one minute's end only), then sent again and answered.
    answers: dict[str, object] = {}
    errors: dict[str, BaseException] = {}

    def second(name: str) -> None:
        client, call = clients[name]
        try:
            answers[name] = call(client)
        except BaseException as err:  # reported below, in the test's thread
            errors[name] = err

    threads = [threading.Thread(target=second, args=(name,)) for name in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for name in clients:
        response = answers[name]
        assert response.http_response.status_code == 200, name
        # The first call, then the refused one and its retry.
        assert attempts[name].count == 3, (name, attempts[name].paths)
        assert response.headers["x-ratelimit-remaining-requests"] == "0"
        assert int(response.headers["x-tollgate-cost-usd-micros"]) > 0
    assert int(time.time() // 60) > minute, "the retry came in the next minute"
