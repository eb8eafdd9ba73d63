"""The official OpenAI SDK through the gateway: every call is charged exactly
the price of the usage the SDK reports, and leaves no reservation open."""

from __future__ import annotations

import httpx2
import openai
import pytest

CHAT_MODEL = "gpt-4o-mini"
EMBEDDING_MODEL = "text-embedding-3-small"


# Long enough that a part of it can be reported as read from the cache.
LONG_PROMPT = " ".join(["Here is some shared context that a prompt cache would hold."] * 4)


def ask(words: int, extra: str = "") -> list[dict]:
    """A conversation whose reply the mock makes exactly `words` tokens long."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"Name a few colours, please. {extra} mock:tokens={words}"},
    ]


def assert_cost_headers(headers, cost: int, after) -> None:
    assert headers["x-tollgate-request-id"]
    assert int(headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


# === chat completions ===


def test_chat_completion_is_charged_its_usage(oai, meter, prices):
    raw = oai.chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=ask(9))
    completion = raw.parse()

    assert completion.usage.completion_tokens == 9
    assert len(completion.choices[0].message.content.split()) == 9
    cost = prices.chat_cost(CHAT_MODEL, completion.usage)
    assert cost > 0
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)


def test_chat_completion_prices_cached_input_apart(oai, meter, prices):
    completion = oai.chat.completions.create(model=CHAT_MODEL, messages=ask(4, extra=f"{LONG_PROMPT} mock:cached=16"))

    assert completion.usage.prompt_tokens_details.cached_tokens == 16
    assert completion.usage.prompt_tokens > 16
    cost = prices.chat_cost(CHAT_MODEL, completion.usage)
    assert cost < prices.cost(CHAT_MODEL, input=completion.usage.prompt_tokens, output=4), "cache reads are cheaper"
    meter.assert_charged(cost)


def test_chat_completion_keeps_the_clients_output_limit(oai, meter, prices):
    completion = oai.chat.completions.create(model=CHAT_MODEL, messages=ask(40), max_completion_tokens=5)

    assert completion.usage.completion_tokens == 5
    assert completion.choices[0].finish_reason == "length"
    meter.assert_charged(prices.chat_cost(CHAT_MODEL, completion.usage))


def test_chat_stream_hides_the_usage_chunk_the_client_did_not_ask_for(oai, meter, prices):
    messages = ask(11)
    # The same prompt unstreamed tells how many input tokens the mock counts.
    twin = oai.chat.completions.create(model=CHAT_MODEL, messages=messages)
    meter.restart()

    with oai.chat.completions.create(model=CHAT_MODEL, messages=messages, stream=True) as stream:
        chunks = list(stream)

    assert chunks, "the stream delivered no chunk"
    leaked = [chunk for chunk in chunks if chunk.usage is not None or not chunk.choices]
    assert not leaked, f"usage-only chunk reached a client that did not ask for usage: {leaked}"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert len(text.split()) == 11, f"streamed text is incomplete: {text!r}"
    assert chunks[-1].choices[0].finish_reason == "stop"

    cached = getattr(twin.usage.prompt_tokens_details, "cached_tokens", None) or 0
    expected = prices.cost(
        CHAT_MODEL,
        input=twin.usage.prompt_tokens - cached,
        cached_input=cached,
        output=len(text.split()),
    )
    meter.assert_charged(expected)


def test_chat_stream_delivers_the_usage_chunk_the_client_asked_for(oai, meter, prices):
    with oai.chat.completions.create(
        model=CHAT_MODEL,
        messages=ask(6),
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = list(stream)

    with_usage = [chunk for chunk in chunks if chunk.usage is not None]
    assert len(with_usage) == 1, f"expected one usage chunk, got {len(with_usage)}"
    last = chunks[-1]
    assert last.usage is not None and last.choices == [], "the usage chunk must come last, without choices"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len(text.split()) == 6
    assert last.usage.completion_tokens == 6
    meter.assert_charged(prices.chat_cost(CHAT_MODEL, last.usage))


@pytest.mark.parametrize("pacing", ["mock:sleep_ms=20", ""], ids=["paced", "burst"])
def test_chat_stream_cut_upstream_still_settles(pacing, oai, meter, prices):
    """The provider drops the connection after 3 tokens and no usage ever
    comes, yet the call is settled (input estimate + output seen), far below
    what was reserved for the output allowance."""
    text = ""
    try:
        with oai.chat.completions.create(
            model=CHAT_MODEL, messages=ask(50, extra=f"mock:cut=3 {pacing}"), max_tokens=2000, stream=True
        ) as stream:
            for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
    except (openai.APIError, httpx2.HTTPError):
        pass  # how the cut surfaces is up to the SDK; the charge is what matters

    _, charged = meter.assert_settled()
    assert len(text.split()) == 3, f"the tokens sent before the cut did not all arrive: {text!r}"
    assert charged >= prices.cost(CHAT_MODEL, output=len(text.split()))
    assert charged < prices.cost(CHAT_MODEL, output=2000), "the unused output allowance was not released"


def test_chat_stream_helper_final_completion(oai, meter, prices):
    with oai.chat.completions.stream(
        model=CHAT_MODEL,
        messages=ask(5),
        stream_options={"include_usage": True},
    ) as stream:
        for _event in stream:
            pass
        final = stream.get_final_completion()

    assert len(final.choices[0].message.content.split()) == 5
    assert final.usage is not None and final.usage.completion_tokens == 5
    meter.assert_charged(prices.chat_cost(CHAT_MODEL, final.usage))


# === responses ===


def test_response_is_charged_its_usage(oai, meter, prices):
    raw = oai.responses.with_raw_response.create(model=CHAT_MODEL, input="Name a colour. mock:tokens=8")
    response = raw.parse()

    assert response.status == "completed"
    assert response.usage.output_tokens == 8
    assert len(response.output_text.split()) == 8
    cost = prices.responses_cost(CHAT_MODEL, response.usage)
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)


def test_response_prices_cached_input_apart(oai, meter, prices):
    response = oai.responses.create(model=CHAT_MODEL, input=f"{LONG_PROMPT} mock:cached=12 mock:tokens=3")

    assert response.usage.input_tokens_details.cached_tokens == 12
    assert response.usage.output_tokens == 3
    meter.assert_charged(prices.responses_cost(CHAT_MODEL, response.usage))


def test_response_stream_events_end_with_completed_usage(oai, meter, prices):
    with oai.responses.create(
        model=CHAT_MODEL,
        input=[{"role": "user", "content": "Name some colours. mock:tokens=7"}],
        stream=True,
    ) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed", f"stream did not end with response.completed: {kinds[-3:]}"
    assert kinds.count("response.completed") == 1
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert len(text.split()) == 7
    usage = events[-1].response.usage
    assert usage.output_tokens == 7
    meter.assert_charged(prices.responses_cost(CHAT_MODEL, usage))


def test_response_stream_helper_final_response(oai, meter, prices):
    with oai.responses.stream(model=CHAT_MODEL, input="Name some colours. mock:tokens=4") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert final.output_text == "".join(deltas)
    assert len(final.output_text.split()) == 4
    assert final.usage.output_tokens == 4
    meter.assert_charged(prices.responses_cost(CHAT_MODEL, final.usage))


# === embeddings ===


def test_embeddings_are_charged_their_input(oai, meter, prices):
    raw = oai.embeddings.with_raw_response.create(
        model=EMBEDDING_MODEL,
        input=["the first text to embed", "and a second, somewhat longer, text to embed"],
    )
    result = raw.parse()

    assert len(result.data) == 2
    assert all(len(item.embedding) > 0 for item in result.data)
    assert result.usage.prompt_tokens > 0
    cost = prices.embeddings_cost(EMBEDDING_MODEL, result.usage)
    assert cost > 0
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
