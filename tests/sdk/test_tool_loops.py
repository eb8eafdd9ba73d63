"""A whole function-tool loop through the gateway on each API, streamed and
not: the model calls the tool, the client sends its result back, the model
answers with text. Each of the two calls is charged exactly the price of the
usage the SDK saw."""

from __future__ import annotations

import json

import pytest

OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-haiku-4-5"
MAX_TOKENS = 256
PROMPT = "What is the weather in Paris? mock:tokens=6"
FORECAST = json.dumps({"forecast": "sunny", "celsius": 21})

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city to look up"}},
    "required": ["city"],
    "additionalProperties": False,
}

streamed = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


# === chat completions ===

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather in a city", "parameters": PARAMETERS},
    }
]


def chat_turn(oai, messages: list[dict], stream: bool):
    if not stream:
        return oai.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=CHAT_TOOLS)
    with oai.chat.completions.stream(
        model=OPENAI_MODEL,
        messages=messages,
        tools=CHAT_TOOLS,
        stream_options={"include_usage": True},
    ) as events:
        for _event in events:
            pass
        return events.get_final_completion()


@streamed
def test_chat_tool_loop(stream, oai, meter, prices):
    messages = [{"role": "user", "content": PROMPT}]

    first = chat_turn(oai, messages, stream)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    assert first.usage is not None and first.usage.completion_tokens > 0
    meter.assert_charged(prices.chat_cost(OPENAI_MODEL, first.usage))

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
    second = chat_turn(oai, messages, stream)
    assert second.choices[0].finish_reason == "stop"
    assert not second.choices[0].message.tool_calls
    assert len(second.choices[0].message.content.split()) == 6
    assert second.usage.completion_tokens == 6
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    meter.assert_charged(prices.chat_cost(OPENAI_MODEL, second.usage))


# === responses ===

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": PARAMETERS,
        "strict": True,
    }
]


def responses_turn(oai, items: list[dict], stream: bool):
    if not stream:
        return oai.responses.create(model=OPENAI_MODEL, input=items, tools=RESPONSES_TOOLS)
    with oai.responses.stream(model=OPENAI_MODEL, input=items, tools=RESPONSES_TOOLS) as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert kinds[-1] == "response.completed"
    if any(item.type == "function_call" for item in final.output):
        assert "response.function_call_arguments.delta" in kinds
        assert "response.function_call_arguments.done" in kinds
    return final


@streamed
def test_responses_tool_loop(stream, oai, meter, prices):
    items: list[dict] = [{"role": "user", "content": PROMPT}]

    first = responses_turn(oai, items, stream)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"}
    assert first.output_text == ""
    assert first.usage.output_tokens > 0
    meter.assert_charged(prices.responses_cost(OPENAI_MODEL, first.usage))

    meter.restart()
    items += [
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": FORECAST},
    ]
    second = responses_turn(oai, items, stream)
    assert second.status == "completed"
    assert not [item for item in second.output if item.type == "function_call"]
    assert len(second.output_text.split()) == 6
    assert second.usage.output_tokens == 6
    assert second.usage.input_tokens > first.usage.input_tokens
    meter.assert_charged(prices.responses_cost(OPENAI_MODEL, second.usage))


# === anthropic messages ===

ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "The weather in a city", "input_schema": PARAMETERS}]


def messages_turn(claude, messages: list[dict], stream: bool):
    if not stream:
        return claude.messages.create(
            model=ANTHROPIC_MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=ANTHROPIC_TOOLS
        )
    with claude.messages.stream(
        model=ANTHROPIC_MODEL, max_tokens=MAX_TOKENS, messages=messages, tools=ANTHROPIC_TOOLS
    ) as events:
        for _event in events:
            pass
        return events.get_final_message()


@streamed
def test_messages_tool_loop(stream, claude, meter, prices):
    messages: list[dict] = [{"role": "user", "content": PROMPT}]

    first = messages_turn(claude, messages, stream)
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "get_weather"
    assert set(call.input) == {"city"}
    assert first.usage.output_tokens > 0
    meter.assert_charged(prices.messages_cost(ANTHROPIC_MODEL, first.usage))

    meter.restart()
    messages += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": FORECAST}]},
    ]
    second = messages_turn(claude, messages, stream)
    assert second.stop_reason == "end_turn"
    text = "".join(block.text for block in second.content if block.type == "text")
    assert len(text.split()) == 6
    assert second.usage.output_tokens == 6
    assert second.usage.input_tokens > first.usage.input_tokens
    meter.assert_charged(prices.messages_cost(ANTHROPIC_MODEL, second.usage))
