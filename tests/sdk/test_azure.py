"""The official OpenAI SDK's Azure client (`openai.AzureOpenAI`) through the
gateway, set up as an agent would (the gateway as the Azure endpoint, the
gateway key as the Azure key), and the plain `OpenAI` client on Azure's v1
API: every call on a deployment is charged exactly the price of the usage
the SDK reports at the prices of the model the provider maps the deployment
to, and the ledger records it as that model, not the deployment nor the
dated model the answer names; an unmapped deployment is a 404 and a budget
denial a 402, neither charged nor resent.

The session gateway's azure provider maps `prod-4o` to `gpt-4o` and `mini`
to `gpt-4o-mini`; the mock, playing Azure, answers as `gpt-4o-2024-08-06`
and `gpt-4o-mini-2024-07-18` (`AZURE_DEPLOYMENTS` in support.py).
"""

from __future__ import annotations

import json

import openai
import pytest

from support import AZURE_DEPLOYMENTS

# `AzureOpenAI`'s API version for chat, completions and embeddings: the
# current GA one, and the first preview whose dated routes serve Responses.
GA_API_VERSION = "2024-10-21"
RESPONSES_API_VERSION = "2025-04-01-preview"
MAX_TOKENS = 256
PROMPT = "What is the weather in Paris? mock:tokens=6"
FORECAST = json.dumps({"forecast": "sunny", "celsius": 21})

both_deployments = pytest.mark.parametrize("deployment", list(AZURE_DEPLOYMENTS))


def priced(deployment: str) -> str:
    """The model the gateway bills a deployment as."""
    return AZURE_DEPLOYMENTS[deployment][0]


def served(deployment: str) -> str:
    """The model the (mock) Azure resource's answers name."""
    return AZURE_DEPLOYMENTS[deployment][1]


def ask(words: int, extra: str = "") -> list[dict]:
    """A conversation whose reply the mock makes exactly `words` tokens long."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"Name a few colours, please. {extra} mock:tokens={words}"},
    ]


def error_object(err) -> dict:
    body = err.body
    assert isinstance(body, dict), f"error body is not JSON: {body!r}"
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


def assert_cost_headers(headers, cost: int, after) -> None:
    assert headers["x-tollgate-request-id"]
    assert int(headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


def assert_sent(attempts, path: str, api_version: str | None) -> None:
    """The one request the SDK sent went to `path`, with `api-version` (or
    none), and carried the key as Azure's clients do: in `api-key`."""
    assert attempts.paths == [path], attempts.paths
    assert attempts.queries[0].get("api-version") == api_version, attempts.queries
    headers = attempts.headers[0]
    assert headers.get("api-key", "").startswith("tg-"), "AzureOpenAI sends the key in api-key"
    assert "authorization" not in headers


@pytest.fixture
def az(gateway, azure_for):
    """`AzureOpenAI(azure_endpoint=gateway, api_key=key, api_version=GA)`."""
    return azure_for(gateway.sdk_key)


# === chat completions ===


@both_deployments
def test_chat_completion_is_charged_as_the_mapped_model(deployment, gateway, azure_for, meter, ledger, prices, attempts):
    client = azure_for(gateway.sdk_key, attempts)
    raw = client.chat.completions.with_raw_response.create(model=deployment, messages=ask(9))
    completion = raw.parse()

    assert_sent(attempts, f"/openai/deployments/{deployment}/chat/completions", GA_API_VERSION)
    assert completion.model == served(deployment), "the answer names the model the deployment runs"
    assert completion.usage.completion_tokens == 9
    assert len(completion.choices[0].message.content.split()) == 9
    # Azure's annotations reach the client untouched.
    assert completion.prompt_filter_results[0]["content_filter_results"]["hate"]["filtered"] is False
    cost = prices.chat_cost(priced(deployment), completion.usage)
    assert cost > 0
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
    assert ledger.delta() == {priced(deployment): (1, cost)}


def test_chat_completion_prices_cached_input_apart(az, meter, prices):
    context = " ".join(["Here is some shared context that a prompt cache would hold."] * 4)
    completion = az.chat.completions.create(model="mini", messages=ask(4, extra=f"{context} mock:cached=16"))

    assert completion.usage.prompt_tokens_details.cached_tokens == 16
    cost = prices.chat_cost("gpt-4o-mini", completion.usage)
    assert cost < prices.cost("gpt-4o-mini", input=completion.usage.prompt_tokens, output=4), "cache reads are cheaper"
    meter.assert_charged(cost)


def test_chat_completion_keeps_the_clients_output_limit(az, meter, prices):
    completion = az.chat.completions.create(model="prod-4o", messages=ask(40), max_completion_tokens=5)

    assert completion.usage.completion_tokens == 5
    assert completion.choices[0].finish_reason == "length"
    meter.assert_charged(prices.chat_cost("gpt-4o", completion.usage))


@both_deployments
def test_chat_stream_hides_the_usage_chunk_the_client_did_not_ask_for(deployment, az, meter, ledger, prices):
    messages = ask(11)
    # The same prompt unstreamed tells how many input tokens the mock counts.
    twin = az.chat.completions.create(model=deployment, messages=messages)
    meter.restart()
    ledger.before = ledger.rows()

    with az.chat.completions.create(model=deployment, messages=messages, stream=True) as stream:
        chunks = list(stream)

    assert chunks, "the stream delivered no chunk"
    leaked = [chunk for chunk in chunks if chunk.usage is not None]
    assert not leaked, f"usage chunk reached a client that did not ask for usage: {leaked}"
    # Azure opens its streams with the prompt's annotations and no choice;
    # every other chunk carries the choice.
    first, rest = chunks[0], chunks[1:]
    assert first.choices == [] and first.prompt_filter_results, f"not Azure's opening chunk: {first}"
    assert all(chunk.choices for chunk in rest), "a chunk without choices other than Azure's first"
    assert {chunk.model for chunk in rest} == {served(deployment)}
    text = "".join(chunk.choices[0].delta.content or "" for chunk in rest)
    assert len(text.split()) == 11, f"streamed text is incomplete: {text!r}"
    assert rest[-1].choices[0].finish_reason == "stop"

    cached = getattr(twin.usage.prompt_tokens_details, "cached_tokens", None) or 0
    expected = prices.cost(
        priced(deployment),
        input=twin.usage.prompt_tokens - cached,
        cached_input=cached,
        output=len(text.split()),
    )
    meter.assert_charged(expected)
    assert ledger.delta() == {priced(deployment): (1, expected)}


@both_deployments
def test_chat_stream_delivers_the_usage_chunk_the_client_asked_for(deployment, az, meter, ledger, prices):
    with az.chat.completions.create(
        model=deployment,
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
    cost = prices.chat_cost(priced(deployment), last.usage)
    meter.assert_charged(cost)
    assert ledger.delta() == {priced(deployment): (1, cost)}


def test_chat_stream_helper_final_completion(az, meter, prices):
    """The SDK's stream helper folds Azure's choice-less opening chunk."""
    with az.chat.completions.stream(
        model="mini", messages=ask(5), stream_options={"include_usage": True}
    ) as stream:
        for _event in stream:
            pass
        final = stream.get_final_completion()

    assert len(final.choices[0].message.content.split()) == 5
    assert final.usage is not None and final.usage.completion_tokens == 5
    meter.assert_charged(prices.chat_cost("gpt-4o-mini", final.usage))


# === completions and embeddings ===


@both_deployments
def test_completion_is_charged_as_the_mapped_model(deployment, gateway, azure_for, meter, ledger, prices, attempts):
    client = azure_for(gateway.sdk_key, attempts)
    raw = client.completions.with_raw_response.create(model=deployment, prompt="Say some colours. mock:tokens=7")
    completion = raw.parse()

    assert_sent(attempts, f"/openai/deployments/{deployment}/completions", GA_API_VERSION)
    assert completion.model == served(deployment)
    assert completion.usage.completion_tokens == 7
    assert len(completion.choices[0].text.split()) == 7
    cost = prices.chat_cost(priced(deployment), completion.usage)
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
    assert ledger.delta() == {priced(deployment): (1, cost)}


def test_completion_stream_is_charged_its_usage(az, meter, prices):
    with az.completions.create(
        model="mini", prompt="Say some colours. mock:tokens=5", stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)

    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usage) == 1
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    assert len(text.split()) == 5
    assert usage[0].completion_tokens == 5
    meter.assert_charged(prices.chat_cost("gpt-4o-mini", usage[0]))


def test_completion_stream_hides_the_usage_chunk_the_client_did_not_ask_for(az, meter, prices):
    prompt = "Say some colours. mock:tokens=6"
    twin = az.completions.create(model="prod-4o", prompt=prompt)
    meter.restart()

    with az.completions.create(model="prod-4o", prompt=prompt, stream=True) as stream:
        chunks = list(stream)

    assert not [chunk for chunk in chunks if chunk.usage is not None], "a usage chunk leaked"
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    assert len(text.split()) == 6
    meter.assert_charged(prices.cost("gpt-4o", input=twin.usage.prompt_tokens, output=len(text.split())))


@both_deployments
def test_embeddings_are_charged_as_the_mapped_model(deployment, gateway, azure_for, meter, ledger, prices, attempts):
    client = azure_for(gateway.sdk_key, attempts)
    raw = client.embeddings.with_raw_response.create(
        model=deployment,
        input=["the first text to embed", "and a second, somewhat longer, text to embed"],
    )
    result = raw.parse()

    assert_sent(attempts, f"/openai/deployments/{deployment}/embeddings", GA_API_VERSION)
    assert len(result.data) == 2
    assert all(len(item.embedding) > 0 for item in result.data)
    assert result.usage.prompt_tokens > 0
    cost = prices.embeddings_cost(priced(deployment), result.usage)
    assert cost > 0
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
    assert ledger.delta() == {priced(deployment): (1, cost)}


# === responses (dated API, /openai/responses) ===


@pytest.fixture
def az_responses(gateway, azure_for):
    return azure_for(gateway.sdk_key, api_version=RESPONSES_API_VERSION)


def test_response_is_charged_as_the_mapped_model(gateway, azure_for, meter, ledger, prices, attempts):
    client = azure_for(gateway.sdk_key, attempts, api_version=RESPONSES_API_VERSION)
    raw = client.responses.with_raw_response.create(model="mini", input="Name a colour. mock:tokens=8")
    response = raw.parse()

    # Responses is not a deployment route: the deployment goes in `model`.
    assert_sent(attempts, "/openai/responses", RESPONSES_API_VERSION)
    assert response.status == "completed"
    assert response.model == served("mini")
    assert response.usage.output_tokens == 8
    assert len(response.output_text.split()) == 8
    cost = prices.responses_cost("gpt-4o-mini", response.usage)
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
    assert ledger.delta() == {"gpt-4o-mini": (1, cost)}


def test_response_stream_events_end_with_completed_usage(az_responses, meter, ledger, prices):
    with az_responses.responses.create(
        model="mini",
        input=[{"role": "user", "content": "Name some colours. mock:tokens=7"}],
        stream=True,
    ) as stream:
        events = list(stream)

    kinds = [event.type for event in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed", f"stream did not end with response.completed: {kinds[-3:]}"
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert len(text.split()) == 7
    usage = events[-1].response.usage
    assert usage.output_tokens == 7
    cost = prices.responses_cost("gpt-4o-mini", usage)
    meter.assert_charged(cost)
    assert ledger.delta() == {"gpt-4o-mini": (1, cost)}


def test_response_stream_helper_final_response(az_responses, meter, prices):
    with az_responses.responses.stream(model="prod-4o", input="Name some colours. mock:tokens=4") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert final.output_text == "".join(deltas)
    assert final.usage.output_tokens == 4
    meter.assert_charged(prices.responses_cost("gpt-4o", final.usage))


def test_background_response_is_refused_uncharged(az_responses, meter):
    with pytest.raises(openai.BadRequestError) as raised:
        az_responses.responses.create(model="mini", input="Name a colour.", background=True)

    assert "background" in error_object(raised.value)["message"]
    meter.assert_unchanged()


# === a deployment fixed in the client (`azure_deployment`) ===


def test_fixed_deployment_routes_by_the_url_not_the_body(gateway, azure_for, meter, ledger, prices, attempts):
    """`azure_deployment` puts the deployment in the base URL: the body's
    `model` (another deployment here) is ignored, as Azure ignores it."""
    client = azure_for(gateway.sdk_key, attempts, azure_deployment="prod-4o")
    completion = client.chat.completions.create(model="mini", messages=ask(5))

    assert_sent(attempts, "/openai/deployments/prod-4o/chat/completions", GA_API_VERSION)
    assert completion.model == served("prod-4o")
    assert completion.usage.completion_tokens == 5
    cost = prices.chat_cost("gpt-4o", completion.usage)
    meter.assert_charged(cost)
    assert ledger.delta() == {"gpt-4o": (1, cost)}


def test_fixed_deployment_embeddings(gateway, azure_for, meter, prices, attempts):
    client = azure_for(gateway.sdk_key, attempts, azure_deployment="mini")
    result = client.embeddings.create(model="text-embedding-3-small", input="a text to embed")

    assert_sent(attempts, "/openai/deployments/mini/embeddings", GA_API_VERSION)
    meter.assert_charged(prices.embeddings_cost("gpt-4o-mini", result.usage))


def test_fixed_deployment_stream(gateway, azure_for, meter, prices):
    client = azure_for(gateway.sdk_key, azure_deployment="mini")
    with client.chat.completions.create(
        model="mini", messages=ask(4), stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)

    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 4
    meter.assert_charged(prices.chat_cost("gpt-4o-mini", usage))


def test_fixed_deployment_responses_name_the_deployment_in_the_body(gateway, azure_for, meter, prices, attempts):
    """The SDK sends Responses to `/openai/responses` even with a fixed
    deployment: the body's `model` names the deployment there."""
    client = azure_for(gateway.sdk_key, attempts, api_version=RESPONSES_API_VERSION, azure_deployment="prod-4o")
    response = client.responses.create(model="mini", input="Name a colour. mock:tokens=3")

    assert_sent(attempts, "/openai/responses", RESPONSES_API_VERSION)
    assert response.model == served("mini")
    meter.assert_charged(prices.responses_cost("gpt-4o-mini", response.usage))


# === the v1 API with the plain OpenAI client ===


@pytest.fixture
def v1(gateway, openai_for):
    """`OpenAI(base_url=gateway + "/openai/v1/", api_key=key)`, as Azure's
    docs set up the v1 API: a bearer key and no api-version."""
    return lambda attempts=None, **options: openai_for(
        gateway.sdk_key, attempts, base_url=f"{gateway.url}/openai/v1/", **options
    )


def assert_sent_v1(attempts, path: str) -> None:
    assert attempts.paths == [path], attempts.paths
    assert "api-version" not in attempts.queries[0]
    assert attempts.headers[0]["authorization"].startswith("Bearer tg-")
    assert "api-key" not in attempts.headers[0]


def test_v1_chat_completion_with_a_bearer_key(v1, meter, ledger, prices, attempts):
    raw = v1(attempts).chat.completions.with_raw_response.create(model="mini", messages=ask(8))
    completion = raw.parse()

    assert_sent_v1(attempts, "/openai/v1/chat/completions")
    assert completion.model == served("mini")
    assert completion.usage.completion_tokens == 8
    cost = prices.chat_cost("gpt-4o-mini", completion.usage)
    after = meter.assert_charged(cost)
    assert_cost_headers(raw.headers, cost, after)
    assert ledger.delta() == {"gpt-4o-mini": (1, cost)}


def test_v1_chat_stream_with_a_bearer_key(v1, meter, prices):
    with v1().chat.completions.create(
        model="prod-4o", messages=ask(6), stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len(text.split()) == 6
    assert chunks[-1].usage.completion_tokens == 6
    meter.assert_charged(prices.chat_cost("gpt-4o", chunks[-1].usage))


def test_v1_response_with_a_bearer_key(v1, meter, ledger, prices, attempts):
    response = v1(attempts).responses.create(model="mini", input="Name a colour. mock:tokens=6")

    assert_sent_v1(attempts, "/openai/v1/responses")
    assert response.model == served("mini")
    assert response.usage.output_tokens == 6
    cost = prices.responses_cost("gpt-4o-mini", response.usage)
    meter.assert_charged(cost)
    assert ledger.delta() == {"gpt-4o-mini": (1, cost)}


def test_v1_response_stream_with_a_bearer_key(v1, meter, prices):
    with v1().responses.stream(model="mini", input="Name some colours. mock:tokens=5") as stream:
        for _event in stream:
            pass
        final = stream.get_final_response()

    assert len(final.output_text.split()) == 5
    meter.assert_charged(prices.responses_cost("gpt-4o-mini", final.usage))


def test_v1_embeddings_with_a_bearer_key(v1, meter, prices):
    result = v1().embeddings.create(model="prod-4o", input=["one text", "and another"])

    assert len(result.data) == 2
    meter.assert_charged(prices.embeddings_cost("gpt-4o", result.usage))


def test_dated_route_without_api_version_is_refused(gateway, openai_for, meter, attempts):
    """A client pointed at a deployment's URL without `AzureOpenAI` sends no
    `api-version`, which the dated routes require."""
    client = openai_for(gateway.sdk_key, attempts, base_url=f"{gateway.url}/openai/deployments/mini")
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="mini", messages=ask(3))

    assert attempts.paths == ["/openai/deployments/mini/chat/completions"]
    error = error_object(raised.value)
    assert error["code"] == "missing_api_version"
    assert "api-version" in error["message"]
    meter.assert_unchanged()


# === a tool loop ===

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city to look up"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def chat_turn(client, messages: list[dict], stream: bool):
    if not stream:
        return client.chat.completions.create(model="mini", messages=messages, tools=CHAT_TOOLS)
    with client.chat.completions.stream(
        model="mini", messages=messages, tools=CHAT_TOOLS, stream_options={"include_usage": True}
    ) as events:
        for _event in events:
            pass
        return events.get_final_completion()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_tool_loop(stream, az, meter, ledger, prices):
    messages = [{"role": "user", "content": PROMPT}]

    first = chat_turn(az, messages, stream)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    first_cost = prices.chat_cost("gpt-4o-mini", first.usage)
    meter.assert_charged(first_cost)

    meter.restart()
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": FORECAST},
    ]
    second = chat_turn(az, messages, stream)
    assert second.choices[0].finish_reason == "stop"
    assert len(second.choices[0].message.content.split()) == 6
    second_cost = prices.chat_cost("gpt-4o-mini", second.usage)
    meter.assert_charged(second_cost)
    assert ledger.delta() == {"gpt-4o-mini": (2, first_cost + second_cost)}


# === errors ===


UNMAPPED_CALLS = {
    "chat": lambda build: build().chat.completions.create(model="no-such-deployment", messages=ask(3)),
    "chat-stream": lambda build: build().chat.completions.create(
        model="no-such-deployment", messages=ask(3), stream=True
    ),
    "embeddings": lambda build: build().embeddings.create(model="no-such-deployment", input="text"),
    "responses": lambda build: build(api_version=RESPONSES_API_VERSION).responses.create(
        model="no-such-deployment", input="Hello there."
    ),
}


@pytest.mark.parametrize("call", UNMAPPED_CALLS.values(), ids=UNMAPPED_CALLS.keys())
def test_unmapped_deployment_is_not_found_uncharged(call, gateway, azure_for, meter, ledger, attempts):
    with pytest.raises(openai.NotFoundError) as raised:
        call(lambda **options: azure_for(gateway.sdk_key, attempts, **options))

    err = raised.value
    assert err.status_code == 404
    assert err.code == "DeploymentNotFound"
    assert "no-such-deployment" in error_object(err)["message"]
    assert attempts.count == 1
    meter.assert_unchanged()
    assert ledger.delta() == {}


def test_v1_unmapped_deployment_is_not_found_uncharged(v1, meter, attempts):
    with pytest.raises(openai.NotFoundError) as raised:
        v1(attempts).chat.completions.create(model="gpt-4o", messages=ask(3))

    assert raised.value.code == "DeploymentNotFound", "a model name is not a deployment"
    assert attempts.count == 1
    meter.assert_unchanged()


def test_wrong_key_is_an_authentication_error(azure_for, meter, attempts):
    client = azure_for("tg-not-a-configured-key", attempts)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model="mini", messages=ask(3))

    assert raised.value.status_code == 401
    assert attempts.count == 1
    meter.assert_unchanged()


def test_upstream_rate_limit_passes_through_uncharged(gateway, azure_for, meter, attempts):
    client = azure_for(gateway.sdk_key, attempts, max_retries=0)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="mini", messages=ask(3, extra="mock:status=429"))

    assert raised.value.status_code == 429
    assert attempts.count == 1
    meter.assert_unchanged()


BUDGET_CALLS = {
    "chat": lambda build: build().chat.completions.create(model="mini", messages=ask(3)),
    "chat-stream": lambda build: build().chat.completions.create(model="mini", messages=ask(3), stream=True),
    "completions": lambda build: build().completions.create(model="prod-4o", prompt="Hello there."),
    # Long enough that even its input costs more than the tiny key's cap.
    "embeddings": lambda build: build().embeddings.create(model="prod-4o", input=" ".join(["a text to embed"] * 20)),
    "responses-stream": lambda build: build(api_version=RESPONSES_API_VERSION).responses.create(
        model="mini", input="Hello there.", stream=True
    ),
}


@pytest.mark.parametrize("call", BUDGET_CALLS.values(), ids=BUDGET_CALLS.keys())
def test_exhausted_budget_is_402_and_not_retried(call, gateway, azure_for, tiny_meter, attempts):
    # The default max_retries: the SDK would retry a 429 or a 5xx.
    with pytest.raises(openai.APIStatusError) as raised:
        call(lambda **options: azure_for(gateway.tiny_key, attempts, **options))

    err = raised.value
    assert err.status_code == 402
    error = error_object(err)
    assert error["code"] == "budget_exceeded"
    assert "tiny-key" in error["message"], "the message names the scope that denied"
    assert err.response.headers.get("x-should-retry") == "false"
    assert int(err.response.headers["retry-after"]) > 0
    assert attempts.count == 1, f"the SDK retried a budget denial: {attempts.paths}"
    after = tiny_meter.assert_unchanged()
    assert after.key.spent == 0
