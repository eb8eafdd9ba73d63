"""The gateway's own endpoints as a client reaches them."""

from __future__ import annotations

import urllib.request

from support import read_budget


def test_healthz(gateway):
    with urllib.request.urlopen(f"{gateway.url}/healthz", timeout=10) as response:
        assert response.status == 200


def test_budget_of_a_key_in_an_org(gateway):
    budget = read_budget(gateway.url, gateway.sdk_key)

    assert budget.key.id == "sdk-key"
    assert budget.key.period == "total"
    assert budget.key.resets_at is None
    assert budget.key.cap == 10_000_000
    assert budget.key.remaining == budget.key.cap - budget.key.spent - budget.key.reserved
    assert budget.org is not None
    assert budget.org.id == "sdk"
    assert budget.org.cap == 100_000_000


def test_budget_of_a_key_without_an_org(gateway):
    budget = read_budget(gateway.url, gateway.tiny_key)

    assert budget.key.id == "tiny-key"
    assert budget.key.period == "day"
    assert budget.key.resets_at is not None and budget.key.resets_at.endswith("T00:00:00Z")
    assert budget.key.cap == 10
    assert budget.org is None


def test_openai_sdk_lists_the_priced_models(oai):
    ids = {model.id for model in oai.models.list()}

    assert {"gpt-4o-mini", "text-embedding-3-small"} <= ids


def test_anthropic_sdk_lists_the_priced_models(claude):
    ids = {model.id for model in claude.models.list()}

    assert {"claude-opus-4-1", "claude-haiku-4-5"} <= ids
