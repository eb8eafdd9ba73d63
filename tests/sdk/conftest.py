"""Session fixtures: the mock provider and the gateway as real processes, and
clients of the official SDKs pointed at the gateway.

One gateway serves the whole session. Tests run one at a time and each reads
the key's budget before and after its calls (`meter`), so the shared counters
give every test an exact baseline.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

from support import PRICES_FILE, PriceTable, SpendMeter, StartupError, TollgateProcess, tollgate_bin

SDK_KEY_ID = "sdk-key"
TINY_KEY_ID = "tiny-key"
# 10 µUSD: below the estimate of any call, so every call on this key is denied.
TINY_CAP_USD = "0.000010"
CLIENT_TIMEOUT_SECS = 30.0
# Lines of each process's log attached to a failing test's report.
LOG_TAIL_LINES = 40

# The running processes, for the failure reports.
_processes: list[TollgateProcess] = []


def pytest_configure(config):
    # The SDKs read base URLs, keys and extra headers from the environment;
    # a developer's real settings must neither leak into nor redirect a test.
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_")):
            del os.environ[name]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for process in _processes:
            tail = "\n".join(process.output().splitlines()[-LOG_TAIL_LINES:])
            report.sections.append((f"{process.name} log (last {LOG_TAIL_LINES} lines)", tail))
    return report


@dataclass(frozen=True)
class Gateway:
    url: str
    sdk_key: str
    tiny_key: str
    mock_url: str
    admin_key: str


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["RUST_LOG"] = os.environ.get("TOLLGATE_TEST_LOG", "info")
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def _start(name: str, args: list[str], env: dict[str, str]) -> tuple[TollgateProcess, str]:
    process = TollgateProcess(name, args, env)
    try:
        address = process.wait_listening()
    except StartupError as err:
        pytest.fail(str(err), pytrace=False)
    return process, address


def _config(mock_address: str, sdk_key: str, tiny_key: str) -> str:
    def sha256(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    return f"""\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "{PRICES_FILE}"

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://{mock_address}"
api_key_env = "TG_TEST_OPENAI_KEY"
models = ["gpt-*", "text-embedding-*"]

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "http://{mock_address}"
api_key_env = "TG_TEST_ANTHROPIC_KEY"
models = ["claude-*"]

[[orgs]]
id = "sdk"
cap_usd = "100.00"
period = "total"

# "total" periods keep the session's counters from rolling over at midnight
# in the middle of a test.
[[keys]]
id = "{SDK_KEY_ID}"
org = "sdk"
key_sha256 = "{sha256(sdk_key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: the denial carries a retry-after.
[[keys]]
id = "{TINY_KEY_ID}"
key_sha256 = "{sha256(tiny_key)}"
cap_usd = "{TINY_CAP_USD}"
period = "day"
"""


@pytest.fixture(scope="session")
def binary() -> Path:
    path = tollgate_bin()
    if not path.is_file():
        pytest.fail(f"{path} does not exist: run `cargo build` (or set TOLLGATE_BIN)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def gateway(binary: Path, tmp_path_factory) -> Iterator[Gateway]:
    if not PRICES_FILE.is_file():
        pytest.fail(f"{PRICES_FILE} is missing", pytrace=False)
    # The mock accepts only the provider credential, so a successful call
    # proves the gateway swapped the client's key for it.
    provider_secret = f"sk-provider-{secrets.token_hex(16)}"
    sdk_key = f"tg-sdk-{secrets.token_hex(16)}"
    tiny_key = f"tg-tiny-{secrets.token_hex(16)}"
    admin_key = f"tg-admin-{secrets.token_hex(16)}"

    mock, mock_address = _start(
        "mock-upstream",
        [str(binary), "mock-upstream", "--listen", "127.0.0.1:0", "--expect-key", provider_secret],
        _child_env({}),
    )
    config_path = tmp_path_factory.mktemp("tollgate") / "tollgate.toml"
    config_path.write_text(_config(mock_address, sdk_key, tiny_key))
    try:
        server, address = _start(
            "gateway",
            [str(binary), "serve", "--config", str(config_path)],
            _child_env(
                {
                    "TG_TEST_OPENAI_KEY": provider_secret,
                    "TG_TEST_ANTHROPIC_KEY": provider_secret,
                    "TOLLGATE_ADMIN_KEY": admin_key,
                }
            ),
        )
    except BaseException:
        mock.stop()
        raise
    _processes[:] = [server, mock]
    try:
        yield Gateway(
            url=f"http://{address}",
            sdk_key=sdk_key,
            tiny_key=tiny_key,
            mock_url=f"http://{mock_address}",
            admin_key=admin_key,
        )
    finally:
        _processes.clear()
        server.stop()
        mock.stop()
        for process in (server, mock):
            if process.proc.returncode not in (0, -15):
                sys.stderr.write(f"\n--- {process.name} output ---\n{process.output()}\n")


@pytest.fixture(scope="session")
def prices() -> PriceTable:
    return PriceTable()


@pytest.fixture
def meter(gateway: Gateway) -> SpendMeter:
    """The SDK key's budget as it stood when the test began."""
    return SpendMeter(gateway.url, gateway.sdk_key)


@pytest.fixture
def tiny_meter(gateway: Gateway) -> SpendMeter:
    return SpendMeter(gateway.url, gateway.tiny_key)


class AttemptCounter:
    """Counts the HTTP requests an SDK really sends, retries included."""

    def __init__(self):
        self.paths: list[str] = []

    def __call__(self, request) -> None:
        self.paths.append(request.url.path)

    @property
    def count(self) -> int:
        return len(self.paths)


@pytest.fixture
def attempts() -> AttemptCounter:
    return AttemptCounter()


def _http_client(module, attempts: AttemptCounter | None):
    hooks = {"request": [attempts]} if attempts is not None else {}
    return module.DefaultHttpxClient(event_hooks=hooks)


@pytest.fixture
def openai_for(gateway: Gateway):
    """Builds OpenAI clients for a given key, optionally counting attempts."""
    clients: list[openai.OpenAI] = []

    def build(api_key: str, attempts: AttemptCounter | None = None, **options) -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=f"{gateway.url}/v1",
            api_key=api_key,
            timeout=CLIENT_TIMEOUT_SECS,
            http_client=_http_client(openai, attempts),
            **options,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def anthropic_for(gateway: Gateway):
    """Builds Anthropic clients for a given key, optionally counting attempts."""
    clients: list[anthropic.Anthropic] = []

    def build(api_key: str, attempts: AttemptCounter | None = None, **options) -> anthropic.Anthropic:
        client = anthropic.Anthropic(
            base_url=gateway.url,
            api_key=api_key,
            timeout=CLIENT_TIMEOUT_SECS,
            http_client=_http_client(anthropic, attempts),
            **options,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def oai(gateway: Gateway, openai_for) -> openai.OpenAI:
    """The OpenAI SDK as an agent sets it up: a base URL and a key."""
    return openai_for(gateway.sdk_key)


@pytest.fixture
def claude(gateway: Gateway, anthropic_for) -> anthropic.Anthropic:
    """The Anthropic SDK as an agent sets it up: a base URL and a key."""
    return anthropic_for(gateway.sdk_key)
