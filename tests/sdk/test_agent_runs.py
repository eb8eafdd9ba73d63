"""The OpenAI Agents SDK through the gateway, each agent run a budget scope
of its own: the orchestrator sets `x-tollgate-run` and
`x-tollgate-run-cap-usd` once on the SDK client (`default_headers`), and
nothing else changes. A run looping through its tool stops with the SDK's
error at the run's cap; what the run was charged stays within its cap; a
second run on the same key goes on working."""

from __future__ import annotations

import json
import secrets
import urllib.request

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from support import SpendMeter

MODEL = "gpt-4o-mini"
RUN_CAP_USD = "0.002"
RUN_CAP_MICROS = 2_000
PROMPT = "What is the weather in Paris? mock:tokens=30"

# Traces would go to OpenAI's servers, which a test never reaches.
set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21 C in {city}."


def weather_agent(gateway, run_id: str, cap_usd: str) -> Agent:
    client = openai.AsyncOpenAI(
        base_url=f"{gateway.url}/v1",
        api_key=gateway.sdk_key,
        default_headers={"x-tollgate-run": run_id, "x-tollgate-run-cap-usd": cap_usd},
        max_retries=0,
    )
    return Agent(
        name="weather",
        instructions="Look up the weather with the tool, then answer.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    )


def run_budget(gateway, run_id: str) -> dict:
    request = urllib.request.Request(
        f"{gateway.url}/v1/budget",
        headers={"Authorization": f"Bearer {gateway.sdk_key}", "x-tollgate-run": run_id},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)["run"]


def status_error(err: BaseException) -> openai.APIStatusError | None:
    """The API error an agent run failed with, however the SDK wrapped it."""
    while err is not None:
        if isinstance(err, openai.APIStatusError):
            return err
        err = err.__cause__ or err.__context__
    return None


def test_a_looping_run_stops_at_its_cap_and_another_run_goes_on(gateway):
    meter = SpendMeter(gateway.url, gateway.sdk_key)
    run_id = f"agent-{secrets.token_hex(4)}"
    agent = weather_agent(gateway, run_id, RUN_CAP_USD)

    finished = 0
    with pytest.raises(Exception) as stopped:
        for _ in range(50):
            result = Runner.run_sync(agent, PROMPT)
            assert "Paris" in json.dumps([str(item) for item in result.new_items]) or result.final_output
            finished += 1
    error = status_error(stopped.value)
    assert error is not None, f"the run stopped with {stopped.value!r}, not an API error"
    assert error.status_code == 402
    assert error.body["code"] == "budget_exceeded"
    assert f"run `{run_id}`" in error.message
    assert finished >= 1, "not one whole run fitted under the cap"

    # The run was charged at most its cap, and the key exactly what the run was.
    run = run_budget(gateway, run_id)
    assert run["cap_usd_micros"] == RUN_CAP_MICROS
    assert run["reserved_usd_micros"] == 0
    assert 0 < run["spent_usd_micros"] <= RUN_CAP_MICROS
    _, charged = meter.assert_settled()
    assert charged == run["spent_usd_micros"]

    # Another run on the same key is a budget of its own.
    other_id = f"{run_id}-next"
    result = Runner.run_sync(weather_agent(gateway, other_id, RUN_CAP_USD), PROMPT)
    assert result.final_output
    other = run_budget(gateway, other_id)
    assert 0 < other["spent_usd_micros"] <= RUN_CAP_MICROS
    _, charged = meter.assert_settled()
    assert charged == run["spent_usd_micros"] + other["spent_usd_micros"]


def test_another_cap_for_a_running_run_is_refused_with_409(gateway):
    run_id = f"agent-{secrets.token_hex(4)}"
    Runner.run_sync(weather_agent(gateway, run_id, "0.50"), PROMPT)
    meter = SpendMeter(gateway.url, gateway.sdk_key)
    with pytest.raises(Exception) as refused:
        Runner.run_sync(weather_agent(gateway, run_id, "5.00"), PROMPT)
    error = status_error(refused.value)
    assert error is not None and error.status_code == 409, repr(refused.value)
    assert error.body["code"] == "run_cap_conflict"
    meter.assert_unchanged()
