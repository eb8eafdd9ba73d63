"""Session fixtures: the mock provider and the gateway as real processes, and
clients of the official SDKs pointed at the gateway.

One gateway serves the whole session. Tests run one at a time and each reads
the key's budget before and after its calls (`meter`), so the shared counters
give every test an exact baseline. The Gemini API and Vertex AI tests share a
second mock and gateway (`google_gateway`), started when first asked for.
The session gateway also serves Azure OpenAI: an azure provider with two
deployments (`AZURE_DEPLOYMENTS`), in front of the same mock playing Azure.
Amazon Bedrock has its own mock and gateway (`bedrock_gateway`), behind a
TLS front, as boto3 sends a bearer token over HTTPS only.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anthropic
import boto3
import openai
import pytest
from botocore.config import Config as BotoConfig
from google import genai
from google.genai import types as genai_types
from google.oauth2.credentials import Credentials as GoogleCredentials

from support import (
    AZURE_DEPLOYMENTS,
    BEDROCK_REGION,
    PRICES_FILE,
    ModelSpend,
    PriceTable,
    SpendMeter,
    StartupError,
    TlsFront,
    TollgateProcess,
    make_tls_certificates,
    service_account_json,
    tollgate_bin,
)

SDK_KEY_ID = "sdk-key"
TINY_KEY_ID = "tiny-key"
# 10 µUSD: below the estimate of any call, so every call on this key is denied.
TINY_CAP_USD = "0.000010"
# Keys allowed one request a minute, one per SDK, for the rate limit tests.
RPM_KEY_IDS = ("rpm-openai-key", "rpm-anthropic-key")
CLIENT_TIMEOUT_SECS = 30.0
# Lines of each process's log attached to a failing test's report.
LOG_TAIL_LINES = 40
# Settings the SDKs read from the environment (keys, endpoints, API
# versions; boto3's credentials, regions, profiles, endpoints and bearer
# tokens); a developer's real ones must not leak into a test.
SDK_ENV_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AZURE_", "AWS_")

# The running processes, for the failure reports.
_processes: list[TollgateProcess] = []


def pytest_configure(config):
    # The SDKs read base URLs, keys and extra headers from the environment;
    # a developer's real settings must neither leak into nor redirect a test.
    for name in list(os.environ):
        if name.startswith(SDK_ENV_PREFIXES):
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
    # By key id: the keys of RPM_KEY_IDS.
    rpm_keys: dict[str, str]


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(SDK_ENV_PREFIXES)}
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


def _config(mock_address: str, sdk_key: str, tiny_key: str, rpm_keys: dict[str, str]) -> str:
    def sha256(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    rpm = "".join(
        f"""
[[keys]]
id = "{key_id}"
key_sha256 = "{sha256(key)}"
cap_usd = "1.00"
period = "total"
rpm = 1
"""
        for key_id, key in rpm_keys.items()
    )
    deployments = ", ".join(f'"{name}" = "{priced}"' for name, (priced, _) in AZURE_DEPLOYMENTS.items())
    return f"""\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "{PRICES_FILE}"

# Azure OpenAI: the mock plays the resource on its /openai/ routes.
[[providers]]
name = "azure"
kind = "azure"
base_url = "http://{mock_address}"
api_key_env = "TG_TEST_AZURE_KEY"
deployments = {{ {deployments} }}

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://{mock_address}"
api_key_env = "TG_TEST_OPENAI_KEY"
service_tier_default = "priority"  # the mock plays OpenAI itself
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
{rpm}"""


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
    rpm_keys = {key_id: f"tg-rpm-{secrets.token_hex(16)}" for key_id in RPM_KEY_IDS}

    azure_deployments = [
        arg for name, (_, served) in AZURE_DEPLOYMENTS.items() for arg in ("--azure-deployment", f"{name}={served}")
    ]
    mock, mock_address = _start(
        "mock-upstream",
        [str(binary), "mock-upstream", "--listen", "127.0.0.1:0", "--expect-key", provider_secret, *azure_deployments],
        _child_env({}),
    )
    config_path = tmp_path_factory.mktemp("tollgate") / "tollgate.toml"
    config_path.write_text(_config(mock_address, sdk_key, tiny_key, rpm_keys))
    try:
        server, address = _start(
            "gateway",
            [str(binary), "serve", "--config", str(config_path)],
            _child_env(
                {
                    "TG_TEST_OPENAI_KEY": provider_secret,
                    "TG_TEST_ANTHROPIC_KEY": provider_secret,
                    "TG_TEST_AZURE_KEY": provider_secret,
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
            rpm_keys=rpm_keys,
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


@pytest.fixture
def ledger(gateway: Gateway) -> ModelSpend:
    """The SDK key's spend by model as it stood when the test began."""
    return ModelSpend(gateway.url, gateway.admin_key, SDK_KEY_ID)


class AttemptCounter:
    """Counts the HTTP requests an SDK really sends, retries included."""

    def __init__(self):
        self.paths: list[str] = []
        # Each request's query, parsed: what an Azure client adds.
        self.queries: list[dict[str, str]] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request) -> None:
        self.paths.append(request.url.path)
        self.queries.append(dict(request.url.params))
        self.headers.append({name.lower(): value for name, value in request.headers.items()})

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
    """Builds OpenAI clients for a given key, optionally counting attempts;
    `base_url` is the gateway's `/v1` unless given."""
    clients: list[openai.OpenAI] = []

    def build(
        api_key: str, attempts: AttemptCounter | None = None, *, base_url: str | None = None, **options
    ) -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=base_url or f"{gateway.url}/v1",
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
def azure_for(gateway: Gateway):
    """Builds Azure OpenAI clients (`openai.AzureOpenAI`) whose endpoint is
    the gateway, for a given key and API version, optionally counting
    attempts; other options (`azure_deployment`, `max_retries`, …) pass
    through."""
    clients: list[openai.AzureOpenAI] = []

    def build(
        api_key: str, attempts: AttemptCounter | None = None, *, api_version: str = "2024-10-21", **options
    ) -> openai.AzureOpenAI:
        client = openai.AzureOpenAI(
            azure_endpoint=gateway.url,
            api_key=api_key,
            api_version=api_version,
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
def oai(gateway: Gateway, openai_for) -> openai.OpenAI:
    """The OpenAI SDK as an agent sets it up: a base URL and a key."""
    return openai_for(gateway.sdk_key)


@pytest.fixture
def claude(gateway: Gateway, anthropic_for) -> anthropic.Anthropic:
    """The Anthropic SDK as an agent sets it up: a base URL and a key."""
    return anthropic_for(gateway.sdk_key)


# === Google: the Gemini API and Vertex AI ===

GOOGLE_KEY_ID = "google-key"
GOOGLE_TINY_KEY_ID = "google-tiny-key"
GOOGLE_ORG_ID = "google"
# The project and location the gateway puts in every Vertex path, whatever
# the client named.
VERTEX_PROJECT = "tollgate-test"
VERTEX_LOCATION = "us-central1"
# What the clients name instead: the gateway must replace both.
CLIENT_PROJECT = "client-project"
CLIENT_LOCATION = "europe-west4"
# Settings the Google SDKs read from the environment (keys, project,
# location, API version, Vertex mode, credentials); a developer's own must
# not steer a test.
GOOGLE_ENV_PREFIXES = ("GOOGLE_", "GEMINI_", "CLOUD_ML_", "ANTHROPIC_VERTEX_")


@dataclass(frozen=True)
class GoogleGateway:
    """A gateway in front of the mock's Gemini API and Vertex AI, with one
    org, a key inside it and a tiny key alone."""

    url: str
    key: str
    tiny_key: str
    mock_url: str
    admin_key: str


def _google_config(mock_address: str, credentials_file: Path, key: str, tiny_key: str) -> str:
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
name = "gemini"
kind = "gemini"
base_url = "http://{mock_address}"
api_key_env = "TG_TEST_GEMINI_KEY"
models = ["gemini-*"]

[[providers]]
name = "vertex"
kind = "vertex"
base_url = "http://{mock_address}"
project = "{VERTEX_PROJECT}"
location = "{VERTEX_LOCATION}"
credentials_file = "{credentials_file}"
models = ["gemini-*", "claude-*"]

[[orgs]]
id = "{GOOGLE_ORG_ID}"
cap_usd = "100.00"
period = "total"

[[keys]]
id = "{GOOGLE_KEY_ID}"
org = "{GOOGLE_ORG_ID}"
key_sha256 = "{sha256(key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: every call is denied, with a retry-after.
[[keys]]
id = "{GOOGLE_TINY_KEY_ID}"
key_sha256 = "{sha256(tiny_key)}"
cap_usd = "{TINY_CAP_USD}"
period = "day"
"""


def _clear_google_env() -> None:
    for name in list(os.environ):
        if name.startswith(GOOGLE_ENV_PREFIXES):
            del os.environ[name]


@pytest.fixture(scope="session")
def google_gateway(binary: Path, tmp_path_factory) -> Iterator[GoogleGateway]:
    """The Gemini API and Vertex AI tests' own mock and gateway, started
    once for both files (the session gateway serves OpenAI and Anthropic
    only)."""
    _clear_google_env()
    if not PRICES_FILE.is_file():
        pytest.fail(f"{PRICES_FILE} is missing", pytrace=False)
    # The mock's Gemini routes accept only this key, and its Vertex routes
    # only a token its own /token endpoint issued: a successful call proves
    # the gateway swapped the client's credential for the provider's.
    provider_secret = f"gm-provider-{secrets.token_hex(16)}"
    key = f"tg-google-{secrets.token_hex(16)}"
    tiny_key = f"tg-google-tiny-{secrets.token_hex(16)}"
    admin_key = f"tg-admin-{secrets.token_hex(16)}"

    mock, mock_address = _start(
        "google-mock-upstream",
        [str(binary), "mock-upstream", "--listen", "127.0.0.1:0", "--expect-key", provider_secret],
        _child_env({}),
    )
    directory = tmp_path_factory.mktemp("tollgate-google")
    credentials_file = directory / "service-account.json"
    config_path = directory / "tollgate.toml"
    try:
        credentials_file.write_text(service_account_json(f"http://{mock_address}/token"))
        config_path.write_text(_google_config(mock_address, credentials_file, key, tiny_key))
        server, address = _start(
            "google-gateway",
            [str(binary), "serve", "--config", str(config_path)],
            _child_env({"TG_TEST_GEMINI_KEY": provider_secret, "TOLLGATE_ADMIN_KEY": admin_key}),
        )
    except BaseException:
        mock.stop()
        raise
    started = [server, mock]
    _processes.extend(started)
    try:
        yield GoogleGateway(
            url=f"http://{address}",
            key=key,
            tiny_key=tiny_key,
            mock_url=f"http://{mock_address}",
            admin_key=admin_key,
        )
    finally:
        for process in started:
            if process in _processes:
                _processes.remove(process)
        server.stop()
        mock.stop()
        for process in started:
            if process.proc.returncode not in (0, -15):
                sys.stderr.write(f"\n--- {process.name} output ---\n{process.output()}\n")


@pytest.fixture
def google_meter(google_gateway: GoogleGateway) -> SpendMeter:
    """The Google key's budget as it stood when the test began."""
    return SpendMeter(google_gateway.url, google_gateway.key)


@pytest.fixture
def google_tiny_meter(google_gateway: GoogleGateway) -> SpendMeter:
    return SpendMeter(google_gateway.url, google_gateway.tiny_key)


def _genai_options(base_url: str, attempts: AttemptCounter | None, **options) -> genai_types.HttpOptions:
    # The SDK's own httpx client takes the hook, so every request it really
    # sends (retries included) is counted.
    client_args = {"event_hooks": {"request": [attempts]}} if attempts is not None else None
    return genai_types.HttpOptions(
        base_url=base_url,
        timeout=int(CLIENT_TIMEOUT_SECS * 1000),
        client_args=client_args,
        **options,
    )


@pytest.fixture
def genai_for(google_gateway: GoogleGateway):
    """Builds google-genai clients of the Gemini API for a given key,
    optionally counting attempts; `HttpOptions` fields pass through."""
    clients: list[genai.Client] = []

    def build(api_key: str, attempts: AttemptCounter | None = None, **options) -> genai.Client:
        client = genai.Client(api_key=api_key, http_options=_genai_options(google_gateway.url, attempts, **options))
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def vertex_genai_for(google_gateway: GoogleGateway):
    """Builds google-genai clients of Vertex AI whose credential is the
    gateway key: an OAuth2 credential holding it as its access token (valid
    and never refreshed, so no Google sign-in happens)."""
    clients: list[genai.Client] = []

    def build(api_key: str, attempts: AttemptCounter | None = None, **options) -> genai.Client:
        client = genai.Client(
            vertexai=True,
            project=CLIENT_PROJECT,
            location=CLIENT_LOCATION,
            credentials=GoogleCredentials(token=api_key),
            http_options=_genai_options(google_gateway.url, attempts, **options),
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def anthropic_vertex_for(google_gateway: GoogleGateway):
    """Builds Anthropic's Vertex clients whose access token is the gateway
    key, optionally counting attempts."""
    clients: list[anthropic.AnthropicVertex] = []

    def build(api_key: str, attempts: AttemptCounter | None = None, **options) -> anthropic.AnthropicVertex:
        client = anthropic.AnthropicVertex(
            region=CLIENT_LOCATION,
            project_id=CLIENT_PROJECT,
            access_token=api_key,
            base_url=f"{google_gateway.url}/v1",
            timeout=CLIENT_TIMEOUT_SECS,
            http_client=_http_client(anthropic, attempts),
            **options,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


# === Amazon Bedrock ===

BEDROCK_KEY_ID = "bedrock-key"
BEDROCK_TINY_KEY_ID = "bedrock-tiny-key"
BEDROCK_ORG_ID = "bedrock"


@dataclass(frozen=True)
class BedrockGateway:
    """A gateway in front of the mock's Bedrock Runtime, which takes only
    calls SigV4-signed with the provider's credentials, and a TLS front
    before the gateway: `url` is the front (what boto3 is pointed at, with
    `ca_file` to trust), `plain_url` the gateway itself (budget and admin
    reads)."""

    url: str
    plain_url: str
    ca_file: Path
    key: str
    tiny_key: str
    mock_url: str
    admin_key: str
    front: TlsFront


def _bedrock_config(mock_address: str, key: str, tiny_key: str) -> str:
    def sha256(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    return f"""\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "{PRICES_FILE}"

# SigV4 with temporary credentials (a session token too), which the mock
# verifies on every call.
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "http://{mock_address}"
region = "{BEDROCK_REGION}"
access_key_id_env = "TG_TEST_AWS_ACCESS_KEY_ID"
secret_access_key_env = "TG_TEST_AWS_SECRET_ACCESS_KEY"
session_token_env = "TG_TEST_AWS_SESSION_TOKEN"
models = ["anthropic.claude-*"]

[[orgs]]
id = "{BEDROCK_ORG_ID}"
cap_usd = "100.00"
period = "total"

[[keys]]
id = "{BEDROCK_KEY_ID}"
org = "{BEDROCK_ORG_ID}"
key_sha256 = "{sha256(key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: every call is denied, with a retry-after.
[[keys]]
id = "{BEDROCK_TINY_KEY_ID}"
key_sha256 = "{sha256(tiny_key)}"
cap_usd = "{TINY_CAP_USD}"
period = "day"
"""


@pytest.fixture(scope="session")
def bedrock_gateway(binary: Path, tmp_path_factory) -> Iterator[BedrockGateway]:
    """The Bedrock tests' own mock, gateway and TLS front, started when
    first asked for."""
    if not PRICES_FILE.is_file():
        pytest.fail(f"{PRICES_FILE} is missing", pytrace=False)
    # The mock takes no bearer token on its Bedrock routes, only a SigV4
    # signature by these credentials: a successful call proves the gateway
    # signed it in the client's stead.
    access_key_id = f"AKIDTG{secrets.token_hex(7).upper()}"
    secret_access_key = secrets.token_hex(20)
    session_token = f"tg-session-{secrets.token_hex(24)}"
    key = f"tg-bedrock-{secrets.token_hex(16)}"
    tiny_key = f"tg-bedrock-tiny-{secrets.token_hex(16)}"
    admin_key = f"tg-admin-{secrets.token_hex(16)}"

    mock, mock_address = _start(
        "bedrock-mock-upstream",
        [
            str(binary),
            "mock-upstream",
            "--listen",
            "127.0.0.1:0",
            "--aws-credentials",
            f"{access_key_id}:{secret_access_key}",
        ],
        _child_env({}),
    )
    directory = tmp_path_factory.mktemp("tollgate-bedrock")
    config_path = directory / "tollgate.toml"
    front = None
    try:
        config_path.write_text(_bedrock_config(mock_address, key, tiny_key))
        server, address = _start(
            "bedrock-gateway",
            [str(binary), "serve", "--config", str(config_path)],
            _child_env(
                {
                    "TG_TEST_AWS_ACCESS_KEY_ID": access_key_id,
                    "TG_TEST_AWS_SECRET_ACCESS_KEY": secret_access_key,
                    "TG_TEST_AWS_SESSION_TOKEN": session_token,
                    "TOLLGATE_ADMIN_KEY": admin_key,
                }
            ),
        )
    except BaseException:
        mock.stop()
        raise
    try:
        certificates = make_tls_certificates(directory)
        front = TlsFront(address, certificates)
    except BaseException:
        server.stop()
        mock.stop()
        raise
    started = [server, mock]
    _processes.extend(started)
    try:
        yield BedrockGateway(
            url=front.url,
            plain_url=f"http://{address}",
            ca_file=certificates.ca_file,
            key=key,
            tiny_key=tiny_key,
            mock_url=f"http://{mock_address}",
            admin_key=admin_key,
            front=front,
        )
    finally:
        for process in started:
            if process in _processes:
                _processes.remove(process)
        front.stop()
        server.stop()
        mock.stop()
        for process in started:
            if process.proc.returncode not in (0, -15):
                sys.stderr.write(f"\n--- {process.name} output ---\n{process.output()}\n")


@pytest.fixture
def bedrock_meter(bedrock_gateway: BedrockGateway) -> SpendMeter:
    """The Bedrock key's budget as it stood when the test began."""
    return SpendMeter(bedrock_gateway.plain_url, bedrock_gateway.key)


@pytest.fixture
def bedrock_tiny_meter(bedrock_gateway: BedrockGateway) -> SpendMeter:
    return SpendMeter(bedrock_gateway.plain_url, bedrock_gateway.tiny_key)


@pytest.fixture
def bedrock_ledger(bedrock_gateway: BedrockGateway) -> ModelSpend:
    """The Bedrock key's spend by model as it stood when the test began."""
    return ModelSpend(bedrock_gateway.plain_url, bedrock_gateway.admin_key, BEDROCK_KEY_ID)


class AwsAttempts:
    """Counts the HTTP requests a boto3 client really sends, retries
    included (botocore's `before-send` event, once per attempt): each one's
    path as sent (percent-encoded) and headers (lower-case names)."""

    def __init__(self):
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request, **kwargs) -> None:
        # Returning nothing lets botocore send the request.
        self.paths.append(urlsplit(request.url).path)
        self.headers.append({name.lower(): _header_text(value) for name, value in request.headers.items()})

    def register(self, client) -> None:
        client.meta.events.register("before-send.bedrock-runtime", self)

    @property
    def count(self) -> int:
        return len(self.paths)


def _header_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture
def aws_attempts() -> AwsAttempts:
    return AwsAttempts()


@pytest.fixture
def bedrock_for(bedrock_gateway: BedrockGateway, monkeypatch, tmp_path):
    """Builds boto3 `bedrock-runtime` clients set up as Bedrock's docs set
    up an API key: `AWS_BEARER_TOKEN_BEDROCK` holds the key (here the given
    gateway key) and `endpoint_url` is the gateway (its TLS front, whose CA
    the client trusts). The variable is set for the test alone (boto3 reads
    the token when the client is made and looks for the variable on every
    call); no profile, shared file or instance metadata can lend the client
    other credentials. `attempts` counts what the client sends; other
    options are botocore `Config` fields (`retries`, …)."""
    clients = []
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))

    def build(api_key: str, attempts: AwsAttempts | None = None, **options):
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", api_key)
        client = boto3.session.Session().client(
            "bedrock-runtime",
            region_name=BEDROCK_REGION,
            endpoint_url=bedrock_gateway.url,
            verify=str(bedrock_gateway.ca_file),
            config=BotoConfig(connect_timeout=10, read_timeout=CLIENT_TIMEOUT_SECS, **options),
        )
        if attempts is not None:
            attempts.register(client)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()
