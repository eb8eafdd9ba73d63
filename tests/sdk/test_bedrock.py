"""boto3's `bedrock-runtime` client through the gateway, set up as Bedrock's
docs set up an API key: the gateway key in `AWS_BEARER_TOKEN_BEDROCK` and
the gateway as `endpoint_url`, behind a TLS front (boto3 sends a bearer
token over HTTPS only). Converse and InvokeModel, whole and streamed,
through a cross-region inference profile or the model's own id: every call
is charged exactly the price of the usage boto3 decoded, and the ledger
records it as the model without the profile's prefix. The gateway signs
its calls to the mock with SigV4 and a session token, which the mock
verifies, so an answered call proves the client's key was swapped for the
provider's credentials.

Refusals are Bedrock's exceptions, as boto3 raises them from
`x-amzn-ErrorType`: an unpriced model is a ResourceNotFoundException, a
guardrail a ValidationException, a bad key an UnrecognizedClientException
and a budget refusal a 402 BudgetExceededException, which boto3 sends once
(it retries throttling and 5xx answers, not this); none is charged.
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest
from botocore.exceptions import ClientError

from support import BEDROCK_HAIKU as HAIKU
from support import BEDROCK_HAIKU_PROFILE as PROFILE

ANTHROPIC_VERSION = "bedrock-2023-05-31"
MAX_TOKENS = 256
SYSTEM = [{"text": "You are terse."}]
UNPRICED = "anthropic.claude-nonesuch-20990101-v1:0"
FORECAST = {"forecast": "sunny", "celsius": 21}

both_ids = pytest.mark.parametrize("model_id", [PROFILE, HAIKU], ids=["profile", "model"])


def wire_path(model_id: str, operation: str) -> str:
    """The path boto3 sends: the id percent-encoded (`:` as `%3A`)."""
    return f"/model/{quote(model_id, safe='')}/{operation}"


def ask(words: int, extra: str = "") -> list[dict]:
    """A conversation whose reply the mock makes exactly `words` tokens long."""
    return [{"role": "user", "content": [{"text": f"Name a few colours, please. {extra} mock:tokens={words}"}]}]


def invoke_body(words: int, extra: str = "", **fields) -> str:
    """An InvokeModel body for Claude: Anthropic's Messages without `model`."""
    return json.dumps(
        {
            "anthropic_version": ANTHROPIC_VERSION,
            "max_tokens": MAX_TOKENS,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": f"Name a few colours, please. {extra} mock:tokens={words}"}],
            **fields,
        }
    )


def http_headers(response: dict) -> dict[str, str]:
    return response["ResponseMetadata"]["HTTPHeaders"]


def assert_sent(attempts, key: str, path: str) -> None:
    """The one request boto3 sent went to `path` with the key as a bearer
    token, unsigned (no SigV4 headers)."""
    assert attempts.paths == [path], attempts.paths
    headers = attempts.headers[0]
    assert headers["authorization"] == f"Bearer {key}"
    assert "x-amz-date" not in headers and "x-amz-security-token" not in headers


def assert_cost_headers(response: dict, cost: int, after) -> None:
    headers = http_headers(response)
    assert headers["x-tollgate-request-id"]
    assert int(headers["x-tollgate-cost-usd-micros"]) == cost
    assert int(headers["x-tollgate-budget-remaining-usd-micros"]) == after.key.remaining


def event_kind(event: dict) -> str:
    [kind] = event
    return kind


@pytest.fixture
def bedrock(bedrock_gateway, bedrock_for):
    """A client on the Bedrock key."""
    return bedrock_for(bedrock_gateway.key)


# === Converse ===


@both_ids
def test_converse_is_charged_as_the_model(
    model_id, bedrock_gateway, bedrock_for, bedrock_meter, bedrock_ledger, prices, aws_attempts
):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    response = client.converse(
        modelId=model_id, system=SYSTEM, messages=ask(9), inferenceConfig={"maxTokens": MAX_TOKENS}
    )

    assert_sent(aws_attempts, bedrock_gateway.key, wire_path(model_id, "converse"))
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["stopReason"] == "end_turn"
    message = response["output"]["message"]
    assert message["role"] == "assistant"
    [block] = message["content"]
    assert len(block["text"].split()) == 9
    usage = response["usage"]
    assert usage["outputTokens"] == 9
    assert usage["inputTokens"] > 0
    assert response["metrics"]["latencyMs"] >= 0
    cost = prices.converse_cost(HAIKU, usage)
    assert cost > 0
    after = bedrock_meter.assert_charged(cost)
    assert_cost_headers(response, cost, after)
    assert bedrock_ledger.delta() == {HAIKU: (1, cost)}, "billed as the model, not the profile"


def test_converse_keeps_the_clients_output_limit(bedrock, bedrock_meter, prices):
    response = bedrock.converse(modelId=PROFILE, messages=ask(40), inferenceConfig={"maxTokens": 5})

    assert response["stopReason"] == "max_tokens"
    assert response["usage"]["outputTokens"] == 5
    bedrock_meter.assert_charged(prices.converse_cost(HAIKU, response["usage"]))


def test_converse_prices_cache_reads_and_writes_apart(bedrock, bedrock_meter, prices):
    context = " ".join(["Here is some shared context that a prompt cache would hold."] * 8)
    response = bedrock.converse(
        modelId=PROFILE,
        system=[{"text": f"You are terse. {context}"}, {"cachePoint": {"type": "default"}}],
        messages=ask(4, extra="mock:cached=16 mock:cache_write=8"),
    )

    usage = response["usage"]
    assert usage["cacheReadInputTokens"] == 16
    assert usage["cacheWriteInputTokens"] == 8
    assert usage["outputTokens"] == 4
    cost = prices.converse_cost(HAIKU, usage)
    total_input = usage["inputTokens"] + 16 + 8
    assert cost < prices.cost(HAIKU, input=total_input, output=4), "the cache is priced apart"
    bedrock_meter.assert_charged(cost)


@both_ids
def test_converse_stream_is_decoded_and_charged(
    model_id, bedrock_gateway, bedrock_for, bedrock_meter, bedrock_ledger, prices, aws_attempts
):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    response = client.converse_stream(
        modelId=model_id, system=SYSTEM, messages=ask(7), inferenceConfig={"maxTokens": MAX_TOKENS}
    )
    events = list(response["stream"])

    assert_sent(aws_attempts, bedrock_gateway.key, wire_path(model_id, "converse-stream"))
    assert http_headers(response)["content-type"].startswith("application/vnd.amazon.eventstream")
    kinds = [event_kind(event) for event in events]
    assert kinds[0] == "messageStart", kinds
    assert kinds[-3:] == ["contentBlockStop", "messageStop", "metadata"], kinds
    assert set(kinds[1:-3]) == {"contentBlockDelta"}, kinds
    assert events[0]["messageStart"]["role"] == "assistant"
    text = "".join(event["contentBlockDelta"]["delta"]["text"] for event in events if "contentBlockDelta" in event)
    assert len(text.split()) == 7, text
    assert events[-2]["messageStop"]["stopReason"] == "end_turn"
    metadata = events[-1]["metadata"]
    usage = metadata["usage"]
    assert usage["outputTokens"] == 7
    assert metadata["metrics"]["latencyMs"] >= 0
    cost = prices.converse_cost(HAIKU, usage)
    assert cost > 0
    bedrock_meter.assert_charged(cost)
    assert bedrock_ledger.delta() == {HAIKU: (1, cost)}


def test_converse_stream_arrives_as_it_is_made(bedrock, bedrock_meter, prices):
    """The events come through the gateway and the TLS front as the mock
    sends them (100 ms apart), not gathered at the end."""
    response = bedrock.converse_stream(modelId=PROFILE, messages=ask(6, extra="mock:sleep_ms=100"))
    arrivals = []
    for event in response["stream"]:
        arrivals.append((event_kind(event), time.monotonic()))
        if event_kind(event) == "metadata":
            usage = event["metadata"]["usage"]

    deltas = [at for kind, at in arrivals if kind == "contentBlockDelta"]
    assert len(deltas) == 6
    assert deltas[-1] - deltas[0] >= 0.3, f"the deltas came together: {arrivals}"
    bedrock_meter.assert_charged(prices.converse_cost(HAIKU, usage))


# === InvokeModel (Anthropic's Messages) ===


@both_ids
def test_invoke_model_is_charged_as_the_model(
    model_id, bedrock_gateway, bedrock_for, bedrock_meter, bedrock_ledger, prices, aws_attempts
):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    response = client.invoke_model(
        modelId=model_id, body=invoke_body(8), contentType="application/json", accept="application/json"
    )
    answer = json.loads(response["body"].read())

    assert_sent(aws_attempts, bedrock_gateway.key, wire_path(model_id, "invoke"))
    assert response["contentType"].startswith("application/json")
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert answer["stop_reason"] == "end_turn"
    [block] = answer["content"]
    assert block["type"] == "text" and len(block["text"].split()) == 8
    usage = answer["usage"]
    assert usage["output_tokens"] == 8
    cost = prices.anthropic_json_cost(HAIKU, usage)
    assert cost > 0
    after = bedrock_meter.assert_charged(cost)
    assert_cost_headers(response, cost, after)
    assert bedrock_ledger.delta() == {HAIKU: (1, cost)}


def test_invoke_model_prices_cache_reads_apart(bedrock, bedrock_meter, prices):
    context = " ".join(["Here is some shared context that a prompt cache would hold."] * 8)
    response = bedrock.invoke_model(modelId=PROFILE, body=invoke_body(3, extra=f"{context} mock:cached=16"))
    usage = json.loads(response["body"].read())["usage"]

    assert usage["cache_read_input_tokens"] == 16
    bedrock_meter.assert_charged(prices.anthropic_json_cost(HAIKU, usage))


@both_ids
def test_invoke_model_with_response_stream_is_decoded_and_charged(
    model_id, bedrock_gateway, bedrock_for, bedrock_meter, bedrock_ledger, prices, aws_attempts
):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    response = client.invoke_model_with_response_stream(modelId=model_id, body=invoke_body(6))
    frames = list(response["body"])

    assert_sent(aws_attempts, bedrock_gateway.key, wire_path(model_id, "invoke-with-response-stream"))
    assert response["contentType"] == "application/json"
    assert all(event_kind(frame) == "chunk" for frame in frames), frames
    events = [json.loads(frame["chunk"]["bytes"]) for frame in frames]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    assert "message_delta" in kinds
    text = "".join(
        event["delta"]["text"]
        for event in events
        if event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta"
    )
    assert len(text.split()) == 6, text
    [delta] = [event for event in events if event["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    # The input (and cache) counts open the stream, the output closes it.
    usage = {**events[0]["message"]["usage"], "output_tokens": delta["usage"]["output_tokens"]}
    assert usage["output_tokens"] == 6
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == 6
    assert metrics["inputTokenCount"] == usage["input_tokens"]
    cost = prices.anthropic_json_cost(HAIKU, usage)
    assert cost > 0
    bedrock_meter.assert_charged(cost)
    assert bedrock_ledger.delta() == {HAIKU: (1, cost)}


# === a tool loop through Converse ===

TOOL_CONFIG = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "The weather in a city",
                "inputSchema": {
                    "json": {
                        "type": "object",
                        "properties": {"city": {"type": "string", "description": "The city to look up"}},
                        "required": ["city"],
                    }
                },
            }
        }
    ]
}


def converse_turn(client, messages: list[dict], stream: bool) -> tuple[dict, str, dict]:
    """One Converse turn with the tool: the assistant's message, the stop
    reason and the usage; a stream's events folded as a client folds them."""
    if not stream:
        response = client.converse(modelId=PROFILE, messages=messages, toolConfig=TOOL_CONFIG)
        return response["output"]["message"], response["stopReason"], response["usage"]
    response = client.converse_stream(modelId=PROFILE, messages=messages, toolConfig=TOOL_CONFIG)
    blocks: dict[int, dict] = {}
    stop_reason = usage = None
    for event in response["stream"]:
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            tool_use = start["start"]["toolUse"]
            blocks[start["contentBlockIndex"]] = {"toolUse": {**tool_use, "input": ""}}
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]
            block = blocks.setdefault(delta["contentBlockIndex"], {"text": ""})
            if "toolUse" in delta["delta"]:
                block["toolUse"]["input"] += delta["delta"]["toolUse"]["input"]
            else:
                block["text"] += delta["delta"]["text"]
        elif "messageStop" in event:
            stop_reason = event["messageStop"]["stopReason"]
        elif "metadata" in event:
            usage = event["metadata"]["usage"]
    content = []
    for _, block in sorted(blocks.items()):
        if "toolUse" in block:
            block = {"toolUse": {**block["toolUse"], "input": json.loads(block["toolUse"]["input"])}}
        content.append(block)
    assert usage is not None, "the stream had no metadata"
    return {"role": "assistant", "content": content}, stop_reason, usage


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_converse_tool_loop(stream, bedrock, bedrock_meter, bedrock_ledger, prices):
    messages = [{"role": "user", "content": [{"text": "What is the weather in Paris? mock:tokens=6"}]}]

    message, stop_reason, usage = converse_turn(bedrock, messages, stream)
    assert stop_reason == "tool_use"
    [block] = message["content"]
    call = block["toolUse"]
    assert call["name"] == "get_weather"
    assert call["toolUseId"]
    assert set(call["input"]) == {"city"}
    first_cost = prices.converse_cost(HAIKU, usage)
    bedrock_meter.assert_charged(first_cost)

    bedrock_meter.restart()
    messages += [
        message,
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call["toolUseId"], "content": [{"json": FORECAST}], "status": "success"}}
            ],
        },
    ]
    message, stop_reason, usage = converse_turn(bedrock, messages, stream)
    assert stop_reason == "end_turn"
    [block] = message["content"]
    assert len(block["text"].split()) == 6
    second_cost = prices.converse_cost(HAIKU, usage)
    bedrock_meter.assert_charged(second_cost)
    assert bedrock_ledger.delta() == {HAIKU: (2, first_cost + second_cost)}


# === refusals ===


def client_error(raised) -> tuple[str, int, str]:
    """A ClientError's code, HTTP status and message, as boto3 parsed them."""
    error = raised.value.response["Error"]
    return error["Code"], raised.value.response["ResponseMetadata"]["HTTPStatusCode"], error["Message"]


UNPRICED_CALLS = {
    "converse": lambda client: client.converse(modelId=UNPRICED, messages=ask(3)),
    "converse-stream-profile": lambda client: client.converse_stream(modelId=f"us.{UNPRICED}", messages=ask(3)),
    "invoke": lambda client: client.invoke_model(modelId=UNPRICED, body=invoke_body(3)),
    "invoke-stream": lambda client: client.invoke_model_with_response_stream(modelId=UNPRICED, body=invoke_body(3)),
}


@pytest.mark.parametrize("call", UNPRICED_CALLS.values(), ids=UNPRICED_CALLS.keys())
def test_unpriced_model_is_not_found_uncharged(
    call, bedrock_gateway, bedrock_for, bedrock_meter, bedrock_ledger, aws_attempts
):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    with pytest.raises(client.exceptions.ResourceNotFoundException) as raised:
        call(client)

    code, status, message = client_error(raised)
    assert (code, status) == ("ResourceNotFoundException", 404)
    assert UNPRICED in message
    assert aws_attempts.count == 1
    bedrock_meter.assert_unchanged()
    assert bedrock_ledger.delta() == {}


GUARDED_CALLS = {
    "converse-guardrail-config": lambda client: client.converse(
        modelId=PROFILE,
        messages=ask(3),
        guardrailConfig={"guardrailIdentifier": "tollgate-test-guardrail", "guardrailVersion": "1"},
    ),
    "converse-stream-guardrail-config": lambda client: client.converse_stream(
        modelId=PROFILE,
        messages=ask(3),
        guardrailConfig={"guardrailIdentifier": "tollgate-test-guardrail", "guardrailVersion": "1"},
    ),
    # InvokeModel names its guardrail in X-Amzn-Bedrock-GuardrailIdentifier.
    "invoke-guardrail-header": lambda client: client.invoke_model(
        modelId=PROFILE, body=invoke_body(3), guardrailIdentifier="tollgate-test-guardrail", guardrailVersion="1"
    ),
}


@pytest.mark.parametrize("call", GUARDED_CALLS.values(), ids=GUARDED_CALLS.keys())
def test_guardrail_is_a_validation_error_uncharged(call, bedrock_gateway, bedrock_for, bedrock_meter, aws_attempts):
    client = bedrock_for(bedrock_gateway.key, aws_attempts)
    with pytest.raises(client.exceptions.ValidationException) as raised:
        call(client)

    code, status, message = client_error(raised)
    assert (code, status) == ("ValidationException", 400)
    assert "guardrail" in message.lower(), message
    assert aws_attempts.count == 1
    bedrock_meter.assert_unchanged()


def test_wrong_key_is_an_unrecognized_client(bedrock_for, bedrock_meter, aws_attempts):
    client = bedrock_for("tg-not-a-configured-key", aws_attempts)
    with pytest.raises(ClientError) as raised:
        client.converse(modelId=PROFILE, messages=ask(3))

    code, status, _ = client_error(raised)
    assert (code, status) == ("UnrecognizedClientException", 401)
    assert aws_attempts.count == 1
    bedrock_meter.assert_unchanged()


def test_upstream_throttling_passes_through_is_retried_and_uncharged(
    bedrock_gateway, bedrock_for, bedrock_meter, aws_attempts
):
    """Bedrock's own throttling reaches boto3 as it is, and boto3 retries
    it: the counter the budget tests rely on sees each attempt."""
    client = bedrock_for(bedrock_gateway.key, aws_attempts, retries={"mode": "standard", "total_max_attempts": 2})
    with pytest.raises(client.exceptions.ThrottlingException) as raised:
        client.converse(modelId=PROFILE, messages=ask(3, extra="mock:status=429"))

    code, status, _ = client_error(raised)
    assert (code, status) == ("ThrottlingException", 429)
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert aws_attempts.count == 2, aws_attempts.paths
    bedrock_meter.assert_unchanged()


BUDGET_CALLS = {
    "converse": lambda client: client.converse(modelId=PROFILE, messages=ask(3)),
    "converse-stream": lambda client: client.converse_stream(modelId=PROFILE, messages=ask(3)),
    "invoke": lambda client: client.invoke_model(modelId=HAIKU, body=invoke_body(3)),
    "invoke-stream": lambda client: client.invoke_model_with_response_stream(modelId=PROFILE, body=invoke_body(3)),
}
# boto3's retry modes, each of which retries throttling and 5xx answers:
# `standard` (botocore's default), `legacy` and `adaptive`.
RETRY_MODES = ["standard", "legacy", "adaptive"]


@pytest.mark.parametrize("mode", RETRY_MODES)
@pytest.mark.parametrize("call", BUDGET_CALLS.values(), ids=BUDGET_CALLS.keys())
def test_exhausted_budget_is_402_and_not_retried(
    call, mode, bedrock_gateway, bedrock_for, bedrock_tiny_meter, aws_attempts
):
    client = bedrock_for(bedrock_gateway.tiny_key, aws_attempts, retries={"mode": mode})
    with pytest.raises(ClientError) as raised:
        call(client)

    code, status, message = client_error(raised)
    assert (code, status) == ("BudgetExceededException", 402)
    assert "bedrock-tiny-key" in message, "the message names the scope that denied"
    headers = http_headers(raised.value.response)
    assert headers["x-amzn-errortype"] == "BudgetExceededException"
    assert headers.get("x-should-retry") == "false"
    assert int(headers["retry-after"]) > 0
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == 0
    assert aws_attempts.count == 1, f"boto3 resent a budget denial: {aws_attempts.paths}"
    after = bedrock_tiny_meter.assert_unchanged()
    assert after.key.spent == 0
