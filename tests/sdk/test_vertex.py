"""Vertex AI clients through the gateway, their credential the gateway key:
google-genai in Vertex mode (Gemini under publishers/google) and
Anthropic's `AnthropicVertex` (Claude under publishers/anthropic, via
rawPredict and streamRawPredict). The gateway swaps the key for its own
service account's access token and the client's project and location for
its own; every call is charged exactly the price of the usage it reported;
a denial is a 402 neither SDK resends; a burst at a tight cap never spends
past it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import pytest
from google.genai import errors, types

from support import SpendMeter, admin_call, read_budget, run_burst, usd_string

GEMINI_MODEL = "gemini-2.5-flash"
# Claude as Vertex names it: the snapshot after an `@`.
CLAUDE_MODEL = "claude-haiku-4-5@20251001"
MAX_OUTPUT_TOKENS = 256

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city to look up"}},
    "required": ["city"],
}
GEMINI_WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather", description="The weather in a city", parameters=WEATHER_PARAMETERS
        )
    ]
)
CLAUDE_WEATHER = [{"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER_PARAMETERS}]
FORECAST = {"forecast": "sunny", "celsius": 21}


def ask(words: int, extra: str = "") -> str:
    """A prompt whose reply the mock makes exactly `words` tokens long."""
    return f"Name a few colours, please. {extra} mock:tokens={words}"


def gemini_config(**fields) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(max_output_tokens=MAX_OUTPUT_TOKENS, **fields)


def assert_cost_headers(headers, cost: int, after) -> None:
    assert headers["x-tollgate-request-id"]
    assert int(headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


@pytest.fixture
def vertex(google_gateway, vertex_genai_for):
    return vertex_genai_for(google_gateway.key)


@pytest.fixture
def claude_vertex(google_gateway, anthropic_vertex_for):
    return anthropic_vertex_for(google_gateway.key)


# === Gemini on Vertex (google-genai) ===


def test_gemini_generate_is_charged_its_usage(vertex, google_meter, prices):
    response = vertex.models.generate_content(model=GEMINI_MODEL, contents=ask(9), config=gemini_config())

    assert len(response.text.split()) == 9
    usage = response.usage_metadata
    assert usage.candidates_token_count == 9
    cost = prices.gemini_cost(GEMINI_MODEL, usage)
    assert cost > 0
    after = google_meter.assert_charged(cost)
    assert_cost_headers(response.sdk_http_response.headers, cost, after)


def test_gemini_generate_on_v1_is_charged_its_usage(google_gateway, vertex_genai_for, google_meter, prices):
    """genai's Vertex default is `/v1beta1`; `api_version="v1"` sends `/v1`."""
    client = vertex_genai_for(google_gateway.key, api_version="v1")
    response = client.models.generate_content(
        model=GEMINI_MODEL, contents=ask(4, extra="mock:cached=3 mock:thoughts=2"), config=gemini_config()
    )

    usage = response.usage_metadata
    assert (usage.candidates_token_count, usage.cached_content_token_count, usage.thoughts_token_count) == (4, 3, 2)
    google_meter.assert_charged(prices.gemini_cost(GEMINI_MODEL, usage))


def test_gemini_stream_is_charged_its_last_usage(vertex, google_meter, prices):
    text, usage, last = "", None, None
    for chunk in vertex.models.generate_content_stream(model=GEMINI_MODEL, contents=ask(7), config=gemini_config()):
        text += chunk.text or ""
        usage = chunk.usage_metadata or usage
        last = chunk

    assert len(text.split()) == 7
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert usage.candidates_token_count == 7
    google_meter.assert_charged(prices.gemini_cost(GEMINI_MODEL, usage))


def test_gemini_function_tool_loop_is_charged_each_call(vertex, google_meter, prices):
    question = types.Content(
        role="user", parts=[types.Part.from_text(text="What is the weather in Paris? mock:tokens=5")]
    )
    cfg = gemini_config(tools=[GEMINI_WEATHER])
    call = vertex.models.generate_content(model=GEMINI_MODEL, contents=[question], config=cfg)
    assert [function.name for function in call.function_calls] == ["get_weather"]

    result = types.Content(
        role="user", parts=[types.Part.from_function_response(name="get_weather", response=FORECAST)]
    )
    answer = vertex.models.generate_content(
        model=GEMINI_MODEL, contents=[question, call.candidates[0].content, result], config=cfg
    )
    assert len(answer.text.split()) == 5

    expected = prices.gemini_cost(GEMINI_MODEL, call.usage_metadata) + prices.gemini_cost(
        GEMINI_MODEL, answer.usage_metadata
    )
    google_meter.assert_charged(expected)


# === Claude on Vertex (AnthropicVertex) ===


def test_claude_raw_predict_is_charged_its_usage(claude_vertex, google_meter, prices):
    raw = claude_vertex.messages.with_raw_response.create(
        model=CLAUDE_MODEL, max_tokens=MAX_OUTPUT_TOKENS, messages=[{"role": "user", "content": ask(8)}]
    )
    message = raw.parse()

    assert message.stop_reason == "end_turn"
    assert len(text_of(message).split()) == 8
    assert message.usage.output_tokens == 8
    cost = prices.messages_cost(CLAUDE_MODEL, message.usage)
    assert cost > 0
    after = google_meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)


def test_claude_stream_raw_predict_is_charged_its_final_usage(claude_vertex, google_meter, prices):
    with claude_vertex.messages.stream(
        model=CLAUDE_MODEL,
        max_tokens=MAX_OUTPUT_TOKENS,
        messages=[{"role": "user", "content": ask(6, extra="mock:cached=4")}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert len(text.split()) == 6
    assert final.usage.output_tokens == 6
    assert final.usage.cache_read_input_tokens == 4
    google_meter.assert_charged(prices.messages_cost(CLAUDE_MODEL, final.usage))


def test_claude_keeps_the_clients_output_limit(claude_vertex, google_meter, prices):
    message = claude_vertex.messages.create(
        model=CLAUDE_MODEL, max_tokens=4, messages=[{"role": "user", "content": ask(40)}]
    )

    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 4
    google_meter.assert_charged(prices.messages_cost(CLAUDE_MODEL, message.usage))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_claude_tool_loop_is_charged_each_call(stream, claude_vertex, google_meter, prices):
    def turn(messages):
        options = {
            "model": CLAUDE_MODEL,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "messages": messages,
            "tools": CLAUDE_WEATHER,
        }
        if not stream:
            return claude_vertex.messages.create(**options)
        with claude_vertex.messages.stream(**options) as events:
            return events.get_final_message()

    question = {"role": "user", "content": "What is the weather in Paris? mock:tokens=6"}
    call = turn([question])
    assert call.stop_reason == "tool_use"
    (tool_use,) = [block for block in call.content if block.type == "tool_use"]
    assert tool_use.name == "get_weather"

    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": json.dumps(FORECAST)}],
    }
    answer = turn([question, {"role": "assistant", "content": call.content}, result])
    assert len(text_of(answer).split()) == 6

    expected = prices.messages_cost(CLAUDE_MODEL, call.usage) + prices.messages_cost(CLAUDE_MODEL, answer.usage)
    google_meter.assert_charged(expected)


# === errors ===


def test_wrong_key_is_refused_by_both(vertex_genai_for, anthropic_vertex_for, google_meter, attempts):
    gemini = vertex_genai_for("tg-not-a-configured-key", attempts)
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model=GEMINI_MODEL, contents=ask(3))
    assert raised.value.code == 401

    claude = anthropic_vertex_for("tg-not-a-configured-key", attempts)
    with pytest.raises(anthropic.AuthenticationError):
        claude.messages.create(model=CLAUDE_MODEL, max_tokens=64, messages=[{"role": "user", "content": ask(3)}])

    assert attempts.count == 2, f"a refused key was resent: {attempts.paths}"
    google_meter.assert_unchanged()


def test_claude_without_anthropic_version_is_refused_uncharged(google_gateway, google_meter):
    """rawPredict's body must carry `anthropic_version` (no SDK leaves it
    out); one without is refused in Anthropic's shape and costs nothing."""
    request = urllib.request.Request(
        f"{google_gateway.url}/v1/projects/p/locations/l/publishers/anthropic/models/{CLAUDE_MODEL}:rawPredict",
        data=json.dumps({"max_tokens": 64, "messages": [{"role": "user", "content": ask(3)}]}).encode(),
        headers={"Authorization": f"Bearer {google_gateway.key}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=30)

    assert raised.value.code == 400
    assert json.loads(raised.value.read())["type"] == "error"
    google_meter.assert_unchanged()


GEMINI_CALLS = {
    "gemini-generate": lambda client: client.models.generate_content(model=GEMINI_MODEL, contents=ask(3)),
    "gemini-stream": lambda client: list(client.models.generate_content_stream(model=GEMINI_MODEL, contents=ask(3))),
}


@pytest.mark.parametrize("call", GEMINI_CALLS.values(), ids=GEMINI_CALLS.keys())
def test_gemini_exhausted_budget_is_402_and_not_retried(
    call, google_gateway, vertex_genai_for, google_tiny_meter, attempts
):
    retrying = types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.05)
    client = vertex_genai_for(google_gateway.tiny_key, attempts, retry_options=retrying)
    with pytest.raises(errors.ClientError) as raised:
        call(client)

    assert raised.value.code == 402
    assert "google-tiny-key" in raised.value.message, "the message names the scope that denied"
    assert attempts.count == 1, f"the SDK resent a budget denial: {attempts.paths}"
    google_tiny_meter.assert_unchanged()


CLAUDE_CALLS = {
    "claude-raw-predict": lambda client: client.messages.create(
        model=CLAUDE_MODEL, max_tokens=64, messages=[{"role": "user", "content": ask(3)}]
    ),
    "claude-stream-raw-predict": lambda client: client.messages.create(
        model=CLAUDE_MODEL, max_tokens=64, messages=[{"role": "user", "content": ask(3)}], stream=True
    ),
}


@pytest.mark.parametrize("call", CLAUDE_CALLS.values(), ids=CLAUDE_CALLS.keys())
def test_claude_exhausted_budget_is_402_and_not_retried(
    call, google_gateway, anthropic_vertex_for, google_tiny_meter, attempts
):
    client = anthropic_vertex_for(google_gateway.tiny_key, attempts)  # default max_retries=2
    with pytest.raises(anthropic.APIStatusError) as raised:
        call(client)

    err = raised.value
    assert err.status_code == 402
    assert err.body["type"] == "error", "Claude's routes answer in Anthropic's shape"
    assert "google-tiny-key" in err.body["error"]["message"]
    assert err.response.headers.get("x-should-retry") == "false"
    assert attempts.count == 1, f"the SDK resent a budget denial: {attempts.paths}"
    google_tiny_meter.assert_unchanged()


# === a burst at a tight cap ===

BURST_CALLS = 10
BURST_OUTPUT_TOKENS = 200
# Room for three calls' reservations, not four: each is reserved its whole
# output allowance and spends it, so the cap is reached whatever order the
# calls land in.
BURST_CALLS_THAT_FIT = 3.5


@pytest.mark.parametrize("family", ["gemini", "claude"])
def test_burst_at_a_tight_cap_never_overspends(
    family, google_gateway, vertex_genai_for, anthropic_vertex_for, prices
):
    model = GEMINI_MODEL if family == "gemini" else CLAUDE_MODEL
    cap = int(prices.cost(model, output=BURST_OUTPUT_TOKENS) * BURST_CALLS_THAT_FIT)
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

    if family == "gemini":
        clients = [vertex_genai_for(secret) for _ in range(BURST_CALLS)]
        cfg = types.GenerateContentConfig(
            max_output_tokens=BURST_OUTPUT_TOKENS, thinking_config=types.ThinkingConfig(thinking_budget=0)
        )

        def call(index: int) -> int:
            response = clients[index].models.generate_content(
                model=model, contents=ask(BURST_OUTPUT_TOKENS, extra=f"call {index}"), config=cfg
            )
            return prices.gemini_cost(model, response.usage_metadata)

        def denied(err: BaseException) -> bool:
            return isinstance(err, errors.ClientError) and err.code == 402

    else:
        clients = [anthropic_vertex_for(secret) for _ in range(BURST_CALLS)]

        def call(index: int) -> int:
            message = clients[index].messages.create(
                model=model,
                max_tokens=BURST_OUTPUT_TOKENS,
                messages=[{"role": "user", "content": ask(BURST_OUTPUT_TOKENS, extra=f"call {index}")}],
            )
            return prices.messages_cost(model, message.usage)

        def denied(err: BaseException) -> bool:
            return isinstance(err, anthropic.APIStatusError) and err.status_code == 402

    burst = run_burst(BURST_CALLS, call)

    unexpected = [err for err in burst.errors if not denied(err)]
    assert not unexpected, f"calls failed other than by a budget denial: {unexpected!r}"
    assert burst.results, "no call fitted the cap"
    assert burst.errors, "every call fitted: the cap was not tight"
    _, charged = meter.assert_settled()
    assert charged == sum(burst.results)
    budget = read_budget(google_gateway.url, secret)
    assert budget.key.spent <= budget.key.cap == cap
    assert budget.key.reserved == 0
