"""Google's google-genai SDK on the Gemini API through the gateway, set up as
an agent would (`http_options.base_url` and the gateway key as its API key):
every call is charged exactly the price of the `usageMetadata` it reported,
streamed or not, with function tools; countTokens and the model list are
free; a budget denial is a 402 that the SDK does not resend; a burst at a
tight cap never spends past it."""

from __future__ import annotations

import json
import urllib.request

import pytest
from google.genai import errors, types

from support import SpendMeter, admin_call, read_budget, run_burst, usd_string

MODEL = "gemini-2.5-flash"
MAX_OUTPUT_TOKENS = 256
# Long enough that part of it can be reported as read from the cache.
LONG_CONTEXT = " ".join(["Here is some shared context that a context cache would hold."] * 4)

WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="The weather in a city",
            parameters={
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city to look up"}},
                "required": ["city"],
            },
        )
    ]
)
FORECAST = {"forecast": "sunny", "celsius": 21}


def ask(words: int, extra: str = "") -> str:
    """A prompt whose reply the mock makes exactly `words` tokens long."""
    return f"Name a few colours, please. {extra} mock:tokens={words}"


def config(**fields) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(max_output_tokens=MAX_OUTPUT_TOKENS, **fields)


def assert_cost_headers(response, cost: int, after) -> None:
    headers = response.sdk_http_response.headers
    assert headers["x-tollgate-request-id"]
    assert int(headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


def streamed(client, contents, cfg: types.GenerateContentConfig):
    """A whole stream: its text and the last `usageMetadata` it carried (the
    one that counts)."""
    text, usage, last = "", None, None
    for chunk in client.models.generate_content_stream(model=MODEL, contents=contents, config=cfg):
        text += chunk.text or ""
        usage = chunk.usage_metadata or usage
        last = chunk
    assert last is not None, "the stream sent no chunk"
    return text, usage, last


@pytest.fixture
def gemini(google_gateway, genai_for):
    return genai_for(google_gateway.key)


# === generate ===


def test_generate_is_charged_its_usage(gemini, google_meter, prices):
    response = gemini.models.generate_content(model=MODEL, contents=ask(9), config=config())

    assert len(response.text.split()) == 9
    usage = response.usage_metadata
    assert usage.candidates_token_count == 9
    assert usage.prompt_token_count > 0
    cost = prices.gemini_cost(MODEL, usage)
    assert cost > 0
    after = google_meter.assert_charged(cost)
    assert_cost_headers(response, cost, after)


def test_generate_keeps_the_clients_output_limit(gemini, google_meter, prices):
    response = gemini.models.generate_content(
        model=MODEL, contents=ask(40), config=types.GenerateContentConfig(max_output_tokens=4)
    )

    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert response.usage_metadata.candidates_token_count == 4
    google_meter.assert_charged(prices.gemini_cost(MODEL, response.usage_metadata))


def test_generate_without_an_output_limit_is_charged_its_usage(gemini, google_meter, prices):
    """The gateway sets the limit it reserved for; the answer is billed as
    reported."""
    response = gemini.models.generate_content(model=MODEL, contents=ask(5))

    assert response.usage_metadata.candidates_token_count == 5
    google_meter.assert_charged(prices.gemini_cost(MODEL, response.usage_metadata))


def test_generate_prices_thoughts_cache_and_tool_prompt_by_class(gemini, google_meter, prices):
    """Thoughts are output on top of the candidates; cached tokens are inside
    the prompt count at the cached price; the tool-use prompt is input on top
    of it."""
    response = gemini.models.generate_content(
        model=MODEL,
        contents=ask(3, extra=f"{LONG_CONTEXT} mock:cached=12 mock:thoughts=7 mock:tool_prompt=5"),
        config=config(thinking_config=types.ThinkingConfig(thinking_budget=64)),
    )

    usage = response.usage_metadata
    assert (usage.cached_content_token_count, usage.thoughts_token_count) == (12, 7)
    assert usage.tool_use_prompt_token_count == 5
    assert usage.candidates_token_count == 3
    assert usage.prompt_token_count > 12
    cost = prices.gemini_cost(MODEL, usage)
    uncached = prices.cost(MODEL, input=usage.prompt_token_count + 5, output=3 + 7)
    assert cost < uncached, "cache reads are cheaper"
    google_meter.assert_charged(cost)


def test_generate_with_a_system_instruction_and_history(gemini, google_meter, prices):
    response = gemini.models.generate_content(
        model=MODEL,
        contents=[
            types.Content(role="user", parts=[types.Part.from_text(text="What is the capital of France?")]),
            types.Content(role="model", parts=[types.Part.from_text(text="Paris.")]),
            types.Content(role="user", parts=[types.Part.from_text(text="And of Italy? mock:tokens=3")]),
        ],
        config=config(system_instruction="You are a careful assistant who answers briefly."),
    )

    assert response.usage_metadata.candidates_token_count == 3
    google_meter.assert_charged(prices.gemini_cost(MODEL, response.usage_metadata))


def test_generate_on_v1beta_is_charged_its_usage(google_gateway, genai_for, google_meter, prices):
    """genai's default is `/v1`; the AI SDK and older clients use `/v1beta`."""
    client = genai_for(google_gateway.key, api_version="v1beta")
    response = client.models.generate_content(model=MODEL, contents=ask(4), config=config())

    assert response.usage_metadata.candidates_token_count == 4
    google_meter.assert_charged(prices.gemini_cost(MODEL, response.usage_metadata))


# === streams ===


def test_stream_is_charged_its_last_usage(gemini, google_meter, prices):
    text, usage, last = streamed(gemini, ask(7), config())

    assert len(text.split()) == 7
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert usage.candidates_token_count == 7
    google_meter.assert_charged(prices.gemini_cost(MODEL, usage))


def test_stream_with_thoughts_is_charged_them_as_output(gemini, google_meter, prices):
    text, usage, _ = streamed(
        gemini,
        ask(4, extra="mock:thoughts=9"),
        config(thinking_config=types.ThinkingConfig(thinking_budget=128)),
    )

    assert len(text.split()) == 4
    assert usage.thoughts_token_count == 9
    cost = prices.gemini_cost(MODEL, usage)
    assert cost == prices.cost(MODEL, input=usage.prompt_token_count, output=4 + 9)
    google_meter.assert_charged(cost)


def test_json_array_stream_with_the_key_in_the_query(google_gateway, google_meter, prices):
    """What no SDK sends but the API serves: `streamGenerateContent` without
    `alt=sse` (one JSON array sent piece by piece) and the key as `?key=`."""
    body = {"contents": [{"role": "user", "parts": [{"text": ask(6)}]}], "generationConfig": {"maxOutputTokens": 64}}
    request = urllib.request.Request(
        f"{google_gateway.url}/v1beta/models/{MODEL}:streamGenerateContent?key={google_gateway.key}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers.get_content_type() == "application/json"
        chunks = json.loads(response.read())

    assert isinstance(chunks, list) and chunks
    text = "".join(part.get("text", "") for chunk in chunks for part in chunk["candidates"][0]["content"]["parts"])
    assert len(text.split()) == 6
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    google_meter.assert_charged(prices.gemini_cost(MODEL, chunks[-1]["usageMetadata"]))


# === function tools ===


def tool_loop_turn(client, contents, stream: bool):
    cfg = config(tools=[WEATHER])
    if not stream:
        response = client.models.generate_content(model=MODEL, contents=contents, config=cfg)
        return response.candidates[0].content, response.usage_metadata
    parts, usage = [], None
    for chunk in client.models.generate_content_stream(model=MODEL, contents=contents, config=cfg):
        if chunk.candidates and chunk.candidates[0].content and chunk.candidates[0].content.parts:
            parts.extend(chunk.candidates[0].content.parts)
        usage = chunk.usage_metadata or usage
    return types.Content(role="model", parts=parts), usage


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_function_tool_loop_is_charged_each_call(stream, gemini, google_meter, prices):
    """The model calls the declared function, the client sends its result
    back, the model answers with text: two calls, each charged its usage."""
    question = types.Content(
        role="user", parts=[types.Part.from_text(text="What is the weather in Paris? mock:tokens=6")]
    )
    call_turn, call_usage = tool_loop_turn(gemini, [question], stream)
    calls = [part.function_call for part in call_turn.parts if part.function_call]
    assert [call.name for call in calls] == ["get_weather"]
    assert isinstance(calls[0].args.get("city"), str)

    result = types.Content(
        role="user", parts=[types.Part.from_function_response(name="get_weather", response=FORECAST)]
    )
    answer_turn, answer_usage = tool_loop_turn(gemini, [question, call_turn, result], stream)
    text = "".join(part.text or "" for part in answer_turn.parts)
    assert len(text.split()) == 6

    expected = prices.gemini_cost(MODEL, call_usage) + prices.gemini_cost(MODEL, answer_usage)
    google_meter.assert_charged(expected)


# === free routes ===


def test_count_tokens_is_not_charged(gemini, google_meter):
    counted = gemini.models.count_tokens(model=MODEL, contents=ask(5))

    assert counted.total_tokens > 0
    google_meter.assert_unchanged()


def test_model_list_and_model_are_not_charged(gemini, google_meter):
    names = [model.name for model in gemini.models.list()]
    assert f"models/{MODEL}" in names, names
    assert gemini.models.get(model=MODEL).name == f"models/{MODEL}"
    google_meter.assert_unchanged()


# === errors ===


def test_wrong_key_is_refused_and_not_retried(genai_for, google_meter, attempts):
    client = genai_for("tg-not-a-configured-key", attempts)
    with pytest.raises(errors.ClientError) as raised:
        client.models.generate_content(model=MODEL, contents=ask(3))

    assert raised.value.code == 401
    assert raised.value.message
    assert attempts.count == 1
    google_meter.assert_unchanged()


def test_unpriced_model_is_not_found(gemini, google_meter):
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model="gemini-tollgate-unpriced", contents=ask(3))

    assert raised.value.code == 404
    assert "gemini-tollgate-unpriced" in raised.value.message
    google_meter.assert_unchanged()


def test_upstream_rate_limit_passes_through_uncharged(gemini, google_meter):
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model=MODEL, contents=ask(3, extra="mock:status=429"))

    assert raised.value.code == 429
    assert raised.value.status == "RESOURCE_EXHAUSTED"
    google_meter.assert_unchanged()


GENERATE_CALLS = {
    "generate": lambda client: client.models.generate_content(model=MODEL, contents=ask(3)),
    "stream": lambda client: list(client.models.generate_content_stream(model=MODEL, contents=ask(3))),
}
# genai retries nothing by default; with retry options it resends 408, 429
# and 5xx answers. Neither may resend a budget denial.
RETRIES = {
    "default": {},
    "retrying": {"retry_options": types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.05)},
}


@pytest.mark.parametrize("retries", RETRIES.values(), ids=RETRIES.keys())
@pytest.mark.parametrize("call", GENERATE_CALLS.values(), ids=GENERATE_CALLS.keys())
def test_exhausted_budget_is_402_and_not_retried(call, retries, google_gateway, genai_for, google_tiny_meter, attempts):
    client = genai_for(google_gateway.tiny_key, attempts, **retries)
    with pytest.raises(errors.ClientError) as raised:
        call(client)

    err = raised.value
    assert err.code == 402
    assert err.status, "Google's error shape carries a status"
    assert "google-tiny-key" in err.message, "the message names the scope that denied"
    assert attempts.count == 1, f"the SDK resent a budget denial: {attempts.paths}"
    after = google_tiny_meter.assert_unchanged()
    assert after.key.spent == 0


# === a burst at a tight cap ===

BURST_CALLS = 10
BURST_OUTPUT_TOKENS = 400
# Room for three calls' reservations, not four: each is reserved its whole
# output allowance (thinking off) and spends it, so the cap is reached
# whatever order the calls land in.
BURST_CALLS_THAT_FIT = 3.5


def test_burst_at_a_tight_cap_never_overspends(google_gateway, genai_for, prices):
    per_call = prices.cost(MODEL, output=BURST_OUTPUT_TOKENS)
    cap = int(per_call * BURST_CALLS_THAT_FIT)
    status, made = admin_call(
        google_gateway.url,
        google_gateway.admin_key,
        "POST",
        "/admin/v1/keys",
        {"cap_usd": usd_string(cap), "period": "total"},
    )
    assert status == 201, made
    secret = made["secret"]
    meter = SpendMeter(google_gateway.url, secret)
    cfg = types.GenerateContentConfig(
        max_output_tokens=BURST_OUTPUT_TOKENS, thinking_config=types.ThinkingConfig(thinking_budget=0)
    )
    clients = [genai_for(secret) for _ in range(BURST_CALLS)]

    burst = run_burst(
        BURST_CALLS,
        lambda index: clients[index].models.generate_content(
            model=MODEL, contents=ask(BURST_OUTPUT_TOKENS, extra=f"call {index}"), config=cfg
        ),
    )

    unexpected = [err for err in burst.errors if not (isinstance(err, errors.ClientError) and err.code == 402)]
    assert not unexpected, f"calls failed other than by a budget denial: {unexpected!r}"
    assert burst.results, "no call fitted the cap"
    assert burst.errors, "every call fitted: the cap was not tight"
    _, charged = meter.assert_settled()
    assert charged == sum(prices.gemini_cost(MODEL, response.usage_metadata) for response in burst.results)
    budget = read_budget(google_gateway.url, secret)
    assert budget.key.spent <= budget.key.cap == cap
    assert budget.key.reserved == 0
