"""The official Anthropic SDK through the gateway: every message is charged
exactly the price of its final usage, and leaves no reservation open."""

from __future__ import annotations

from types import SimpleNamespace

import anthropic
import httpx2
import pytest

MODEL = "claude-haiku-4-5"
# A model whose output is all streamed: what was seen of a cut stream
# bounds what it cost (a model with hidden output is charged its bound).
VISIBLE_MODEL = "claude-3-5-haiku-latest"
MAX_TOKENS = 256
USAGE_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


def ask(words: int, extra: str = "") -> list[dict]:
    """A conversation whose reply the mock makes exactly `words` tokens long."""
    return [{"role": "user", "content": f"Name a few colours, please. {extra} mock:tokens={words}"}]


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def final_usage(events) -> SimpleNamespace:
    """The usage of a raw event stream: `message_start` carries the input
    side, each `message_delta` the cumulative counts that replace it."""
    start = next(event for event in events if event.type == "message_start")
    usage = {field: getattr(start.message.usage, field, None) for field in USAGE_FIELDS}
    for event in events:
        if event.type == "message_delta":
            for field in USAGE_FIELDS:
                value = getattr(event.usage, field, None)
                if value is not None:
                    usage[field] = value
    return SimpleNamespace(**usage)


def test_message_is_charged_its_usage(claude, meter, prices):
    raw = claude.messages.with_raw_response.create(model=MODEL, max_tokens=MAX_TOKENS, messages=ask(9))
    message = raw.parse()

    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 9
    assert len(text_of(message).split()) == 9
    cost = prices.messages_cost(MODEL, message.usage)
    assert cost > 0
    after = meter.assert_charged(cost)
    assert raw.headers["x-tollgate-request-id"]
    assert int(raw.headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(raw.headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


def test_message_prices_cache_reads_and_writes_apart(claude, meter, prices):
    context = " ".join(["Here is some shared context that a prompt cache would hold."] * 4)
    message = claude.messages.create(
        model="claude-opus-4-1",
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": f"{context} mock:cached=10 mock:cache_write=14 mock:tokens=3"}],
    )

    usage = message.usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (10, 14)
    assert usage.input_tokens > 0
    meter.assert_charged(prices.messages_cost("claude-opus-4-1", usage))


def test_message_keeps_the_clients_output_limit(claude, meter, prices):
    message = claude.messages.create(model=MODEL, max_tokens=4, messages=ask(40))

    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 4
    meter.assert_charged(prices.messages_cost(MODEL, message.usage))


def test_raw_message_stream_is_charged_its_final_usage(claude, meter, prices):
    with claude.messages.create(model=MODEL, max_tokens=MAX_TOKENS, messages=ask(7), stream=True) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop", f"stream did not end with message_stop: {kinds[-3:]}"
    text = "".join(
        event.delta.text
        for event in events
        if event.type == "content_block_delta" and event.delta.type == "text_delta"
    )
    assert len(text.split()) == 7
    usage = final_usage(events)
    assert usage.output_tokens == 7
    assert usage.input_tokens > 0
    meter.assert_charged(prices.messages_cost(MODEL, usage))


@pytest.mark.parametrize("pacing", ["mock:sleep_ms=20", ""], ids=["paced", "burst"])
def test_raw_message_stream_cut_upstream_still_settles(pacing, claude, meter, prices):
    """The provider drops the connection after 3 tokens and no final usage
    comes, yet the call is settled (input estimate + output seen + the
    in-flight margin), far below what was reserved for the output
    allowance."""
    text = ""
    try:
        with claude.messages.create(
            model=VISIBLE_MODEL, max_tokens=2000, messages=ask(50, extra=f"mock:cut=3 {pacing}"), stream=True
        ) as stream:
            for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text += event.delta.text
    except (anthropic.APIError, httpx2.HTTPError):
        pass  # how the cut surfaces is up to the SDK; the charge is what matters

    _, charged = meter.assert_settled()
    assert len(text.split()) == 3, f"the tokens sent before the cut did not all arrive: {text!r}"
    assert charged >= prices.cost(VISIBLE_MODEL, output=len(text.split()))
    assert charged < prices.cost(VISIBLE_MODEL, output=2000), "the unused output allowance was not released"


def test_message_stream_helper_final_message(claude, meter, prices):
    with claude.messages.stream(model=MODEL, max_tokens=MAX_TOKENS, messages=ask(5)) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text == text_of(final)
    assert len(text.split()) == 5
    assert final.usage.output_tokens == 5
    meter.assert_charged(prices.messages_cost(MODEL, final.usage))


def test_message_with_a_system_prompt_and_history(claude, meter, prices):
    message = claude.messages.create(
        model="claude-opus-4-1",
        max_tokens=MAX_TOKENS,
        system="You are a careful assistant who answers briefly.",
        messages=[
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": [{"type": "text", "text": "And of Italy? mock:tokens=3"}]},
        ],
    )

    assert message.usage.output_tokens == 3
    meter.assert_charged(prices.messages_cost("claude-opus-4-1", message.usage))
