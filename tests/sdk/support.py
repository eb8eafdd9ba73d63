"""Helpers for the SDK suite: the tollgate processes, the budget endpoint and
the expected cost of a call.

The expected cost is computed here independently of the gateway, from the
usage the SDK reports and the decimal prices in config/prices.toml, so that
an exact-equality assertion on the spent counter means something.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import os
import re
import ssl
import subprocess
import threading
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PRICES_FILE = REPO_ROOT / "config" / "prices.toml"
# The session gateway's azure provider's deployments, each with the priced
# model the gateway bills it as and the dated model the mock's answers name
# instead (Azure's answers name the model a deployment runs, never the
# deployment).
AZURE_DEPLOYMENTS = {
    "prod-4o": ("gpt-4o", "gpt-4o-2024-08-06"),
    "mini": ("gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
}
# Amazon Bedrock: the model a Claude call is priced and recorded as, and
# the cross-region inference profile that runs it (the gateway bills both
# ids as the model).
BEDROCK_HAIKU = "anthropic.claude-haiku-4-5-20251001-v1:0"
BEDROCK_HAIKU_PROFILE = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
BEDROCK_REGION = "us-east-1"

# Tracing may print the address as a bare value or as a `field=value` pair,
# quoted or not; ANSI colours are stripped before matching.
LISTENING = re.compile(
    r"listening on\s+(?:[A-Za-z_]+=)?\"?((?:\d{1,3}\.){3}\d{1,3}:\d+|\[[0-9A-Fa-f:]+\]:\d+)"
)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


# === processes ===


def admin_call(gateway_url: str, admin_key: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """An admin API call: its status and JSON body ({} when empty)."""
    request = urllib.request.Request(
        f"{gateway_url}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {admin_key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def tollgate_bin() -> Path:
    """The binary under test: `TOLLGATE_BIN` (relative to the repo root when
    relative), else the debug build."""
    configured = os.environ.get("TOLLGATE_BIN")
    path = Path(configured) if configured else Path("target/debug/tollgate")
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path


class StartupError(Exception):
    """A tollgate process exited or stayed silent instead of binding."""


class TollgateProcess:
    """A tollgate subprocess whose combined output is drained by a thread
    (so a chatty process never blocks on a full pipe) and kept for failure
    messages."""

    def __init__(self, name: str, args: list[str], env: dict[str, str]):
        self.name = name
        self.args = args
        self.lines: list[str] = []
        self.address: str | None = None
        self._bound = threading.Event()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._drain, name=f"{name}-output", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = ANSI_ESCAPE.sub("", raw.rstrip("\n"))
            with self._lock:
                self.lines.append(line)
            if self.address is None:
                found = LISTENING.search(line)
                if found:
                    self.address = found.group(1)
                    self._bound.set()
        # Output closed: the process is gone; wake any waiter.
        self._bound.set()

    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_listening(self, timeout: float = 30.0) -> str:
        """The bound `host:port`, once the process logged it."""
        self._bound.wait(timeout)
        if self.address is not None:
            return self.address
        try:
            # The output closes a moment before the exit status is known.
            status = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            status = None
        why = f"exited with status {status}" if status is not None else f"did not log 'listening on' within {timeout:.0f}s"
        self.stop()
        raise StartupError(
            f"{self.name} {why}.\ncommand: {' '.join(self.args)}\n--- output ---\n{self.output() or '(none)'}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)


# === a TLS front (boto3 sends a bearer token over HTTPS only) ===


@dataclass(frozen=True)
class TlsCertificates:
    """A CA made for the session and a certificate for 127.0.0.1 and
    `localhost` that it signed, as PEM files: a client that trusts
    `ca_file` (boto3's `verify=`) accepts a server that presents
    `cert_file` with `key_file`."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_tls_certificates(directory: Path) -> TlsCertificates:
    """Writes a fresh CA and a server certificate signed by it (P-256,
    valid for a day) into `directory`, with the `cryptography` package."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(timezone.utc)
    valid_from, valid_to = now - timedelta(minutes=5), now + timedelta(days=1)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tollgate test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    files = TlsCertificates(
        ca_file=directory / "ca.pem",
        cert_file=directory / "server.pem",
        key_file=directory / "server-key.pem",
    )
    files.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


class TlsFront:
    """A TLS-terminating TCP proxy in front of a plain listener, as nginx or
    a load balancer stands in front of a gateway: it accepts TLS on
    127.0.0.1 (ALPN `http/1.1`) and copies each connection's bytes, unchanged
    and as they arrive, to a connection of its own to `upstream`
    (`host:port`) and back, so streamed answers stream through it. One
    asyncio loop on its own thread serves every connection."""

    CHUNK = 64 * 1024

    def __init__(self, upstream: str, certificates: TlsCertificates):
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]"), int(port))
        self.connections = 0
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certificates.cert_file, certificates.key_file)
        context.set_alpn_protocols(["http/1.1"])
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-front", daemon=True)
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context), self._loop
        )
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._tasks.add(asyncio.current_task())
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            try:
                # The client's end of its request half-closes the upstream
                # connection; the upstream's end closes everything.
                to_upstream = asyncio.ensure_future(self._copy(client_reader, upstream_writer, half_close=True))
                await self._copy(upstream_reader, client_writer, half_close=False)
                to_upstream.cancel()
            finally:
                upstream_writer.close()
        finally:
            client_writer.close()
            self._tasks.discard(asyncio.current_task())

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half_close: bool) -> None:
        try:
            while data := await reader.read(self.CHUNK):
                writer.write(data)
                await writer.drain()
            if half_close and writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
        except (OSError, ssl.SSLError):
            # A reset on one side ends the other: closing the writer ends
            # its transport, whose reader then sees the end.
            writer.close()

    def stop(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


# === the gateway's own endpoints ===


@dataclass(frozen=True)
class Scope:
    """One scope of a `/v1/budget` answer, in micro-USD."""

    id: str
    period: str
    period_id: str
    cap: int
    spent: int
    reserved: int
    remaining: int
    resets_at: str | None

    @classmethod
    def from_json(cls, scope: dict) -> "Scope":
        return cls(
            id=scope["id"],
            period=scope["period"],
            period_id=scope["period_id"],
            cap=scope["cap_usd_micros"],
            spent=scope["spent_usd_micros"],
            reserved=scope["reserved_usd_micros"],
            remaining=scope["remaining_usd_micros"],
            resets_at=scope["resets_at"],
        )


@dataclass(frozen=True)
class Budget:
    key: Scope
    org: Scope | None


def read_budget(gateway_url: str, raw_key: str) -> Budget:
    request = urllib.request.Request(
        f"{gateway_url}/v1/budget",
        headers={"Authorization": f"Bearer {raw_key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
    except urllib.error.HTTPError as err:
        raise AssertionError(f"GET /v1/budget answered {err.code}: {err.read().decode(errors='replace')}") from err
    org = body.get("org")
    return Budget(key=Scope.from_json(body["key"]), org=Scope.from_json(org) if org else None)


def _held(budget: Budget) -> tuple[int, int]:
    return budget.key.reserved, budget.org.reserved if budget.org else 0


class SpendMeter:
    """Spent and reserved counters of one key (and its org) around a block of
    calls.

    Counters are compared as deltas from the baseline, so a reservation
    leaked by one test fails that test alone rather than every later one.
    """

    def __init__(self, gateway_url: str, raw_key: str):
        self.gateway_url = gateway_url
        self.raw_key = raw_key
        self.restart()

    def restart(self) -> None:
        """Take a new baseline, e.g. after a call made only to learn its usage."""
        self.before = read_budget(self.gateway_url, self.raw_key)

    def after(self, timeout: float = 5.0) -> Budget:
        """The budget once the calls' reservations are settled.

        The gateway settles before the client sees the end of a response, so
        this normally returns at once; the short grace only turns a
        settlement that never happens into a clear assertion, not a hang.
        """
        deadline = time.monotonic() + timeout
        baseline = _held(self.before)
        while True:
            budget = read_budget(self.gateway_url, self.raw_key)
            if _held(budget) <= baseline or time.monotonic() >= deadline:
                return budget
            time.sleep(0.05)

    def assert_settled(self) -> tuple[Budget, int]:
        """No reservation was left open on the key; returns the budget and
        what was charged to the key."""
        after = self.after()
        before = self.before
        assert after.key.period_id == before.key.period_id, "the budget period rolled over during the test"
        leaked = after.key.reserved - before.key.reserved
        assert leaked == 0, f"{leaked} µUSD left reserved on the key after the call: {after.key}"
        return after, after.key.spent - before.key.spent

    def assert_charged(self, expected_micros: int) -> Budget:
        """Exactly `expected_micros` was charged to the key and its org, and no
        reservation was left open."""
        after, delta = self.assert_settled()
        before = self.before
        assert delta == expected_micros, f"key charged {delta} µUSD, usage prices at {expected_micros} µUSD"
        assert after.key.remaining == after.key.cap - after.key.spent - after.key.reserved
        if before.org is not None:
            assert after.org is not None
            leaked = after.org.reserved - before.org.reserved
            assert leaked == 0, f"{leaked} µUSD left reserved on the org after the call: {after.org}"
            org_delta = after.org.spent - before.org.spent
            assert org_delta == expected_micros, f"org charged {org_delta} µUSD, key {delta} µUSD"
        return after

    def assert_unchanged(self) -> Budget:
        """Nothing was charged and nothing is held."""
        return self.assert_charged(0)


class ModelSpend:
    """What the ledger recorded for one key, by model
    (`GET /admin/v1/spend?group_by=model&key=…`), as deltas from the
    baseline taken when it was made: the model a call was billed as."""

    def __init__(self, gateway_url: str, admin_key: str, key_id: str):
        self.gateway_url = gateway_url
        self.admin_key = admin_key
        self.key_id = key_id
        self.before = self.rows()

    def rows(self) -> dict[str, tuple[int, int]]:
        """Calls and µUSD per model. From two days back, so a test that
        runs across midnight (UTC) or a month's end still sees its calls."""
        since = (datetime.now(timezone.utc) - timedelta(days=2)).date().isoformat()
        status, body = admin_call(
            self.gateway_url,
            self.admin_key,
            "GET",
            f"/admin/v1/spend?group_by=model&key={self.key_id}&from={since}",
        )
        assert status == 200, f"GET /admin/v1/spend answered {status}: {body}"
        return {row["group"]: (row["calls"], row["cost_usd_micros"]) for row in body["rows"]}

    def delta(self) -> dict[str, tuple[int, int]]:
        """The models billed since the baseline: calls and µUSD of each."""
        changed = {}
        for model, (calls, cost) in self.rows().items():
            before_calls, before_cost = self.before.get(model, (0, 0))
            if (calls, cost) != (before_calls, before_cost):
                changed[model] = (calls - before_calls, cost - before_cost)
        return changed


# === expected costs ===


@dataclass(frozen=True)
class ModelPrice:
    """µUSD per token for each token class, exact."""

    input: Fraction
    output: Fraction
    cached_input: Fraction
    cache_write: Fraction


class PriceTable:
    """The decimal prices of config/prices.toml."""

    def __init__(self, path: Path = PRICES_FILE):
        with path.open("rb") as file:
            self.models: dict = tomllib.load(file)["models"]

    def price(self, model: str) -> ModelPrice:
        entry = self.models.get(model)
        assert entry is not None, f"{model} is not in {PRICES_FILE}"

        def exact(field: str, fallback: str) -> Fraction:
            # A decimal string (or number) per million tokens is µUSD per token.
            return Fraction(Decimal(str(entry.get(field, entry[fallback]))))

        return ModelPrice(
            input=exact("input_per_mtok", "input_per_mtok"),
            output=exact("output_per_mtok", "output_per_mtok"),
            cached_input=exact("cached_input_per_mtok", "input_per_mtok"),
            cache_write=exact("cache_write_per_mtok", "input_per_mtok"),
        )

    def cost(self, model: str, *, input: int = 0, cached_input: int = 0, cache_write: int = 0, output: int = 0) -> int:
        """Σ tokens × price, rounded up to a whole µUSD once per call."""
        price = self.price(model)
        exact = (
            input * price.input
            + cached_input * price.cached_input
            + cache_write * price.cache_write
            + output * price.output
        )
        return math.ceil(exact)

    # The usage objects below are the SDKs' own models, read by attribute.

    def chat_cost(self, model: str, usage) -> int:
        """An OpenAI chat completion's `usage`."""
        cached = _cached_tokens(getattr(usage, "prompt_tokens_details", None))
        return self.cost(
            model,
            input=usage.prompt_tokens - cached,
            cached_input=cached,
            output=usage.completion_tokens,
        )

    def responses_cost(self, model: str, usage) -> int:
        """An OpenAI Responses API `usage`."""
        cached = _cached_tokens(getattr(usage, "input_tokens_details", None))
        return self.cost(
            model,
            input=usage.input_tokens - cached,
            cached_input=cached,
            output=usage.output_tokens,
        )

    def embeddings_cost(self, model: str, usage) -> int:
        return self.cost(model, input=usage.prompt_tokens)

    def messages_cost(self, model: str, usage) -> int:
        """An Anthropic message's `usage`."""
        return self.cost(
            model,
            input=usage.input_tokens or 0,
            cached_input=getattr(usage, "cache_read_input_tokens", None) or 0,
            cache_write=getattr(usage, "cache_creation_input_tokens", None) or 0,
            output=usage.output_tokens or 0,
        )

    def converse_cost(self, model: str, usage: dict) -> int:
        """A Bedrock Converse `usage` (boto3's dict, or the JSON): its
        `inputTokens` leave out the cache reads and writes, which come
        apart. The tests write no hour-long cache."""
        assert "cacheDetails" not in usage or all(d["ttl"] == "5m" for d in usage["cacheDetails"]), usage
        return self.cost(
            model,
            input=usage["inputTokens"],
            cached_input=usage.get("cacheReadInputTokens") or 0,
            cache_write=usage.get("cacheWriteInputTokens") or 0,
            output=usage["outputTokens"],
        )

    def anthropic_json_cost(self, model: str, usage: dict) -> int:
        """An Anthropic `usage` as JSON (what Bedrock's InvokeModel answers
        with, or a stream's `message_start` usage with the final
        `output_tokens`)."""
        return self.cost(
            model,
            input=usage.get("input_tokens") or 0,
            cached_input=usage.get("cache_read_input_tokens") or 0,
            cache_write=usage.get("cache_creation_input_tokens") or 0,
            output=usage.get("output_tokens") or 0,
        )

    def gemini_cost(self, model: str, usage) -> int:
        """A Gemini answer's `usageMetadata` (see `gemini_tokens`). The tests'
        prompts stay far below any long-context threshold, so the standard
        rates apply: asserted, not assumed."""
        tokens = gemini_tokens(usage)
        threshold = self.models.get(model, {}).get("long_context_threshold_tokens")
        total_input = tokens["input"] + tokens["cached_input"]
        assert threshold is None or total_input <= threshold, f"{total_input} input tokens pass {model}'s long context"
        return self.cost(model, **tokens)


def _cached_tokens(details) -> int:
    if details is None:
        return 0
    return getattr(details, "cached_tokens", None) or 0


# === Google (Gemini API and Vertex AI) ===

# The mock's test service account (a key made for the tests, public in the
# repository): the gateway signs its token requests with it and the mock's
# `/token` endpoint checks them against the public half.
MOCK_SERVICE_ACCOUNT_KEY = REPO_ROOT / "mock" / "fixtures" / "vertex-service-account-key.pem"
# These match mock/src/token.rs: the mock refuses a grant whose `iss` is
# another account or whose `kid` names another key.
MOCK_SERVICE_ACCOUNT_EMAIL = "gateway@tollgate-test.iam.gserviceaccount.com"
MOCK_SERVICE_ACCOUNT_PROJECT = "tollgate-test"
MOCK_SERVICE_ACCOUNT_KEY_ID = "5e1f0c2b9a7d4e3f8b6a1c0d9e8f7a6b5c4d3e2f"
MOCK_SERVICE_ACCOUNT_CLIENT_ID = "108126429573806511234"


def service_account_json(token_uri: str) -> str:
    """A Google service-account file for the mock's test key, as
    `tollgate_mock::service_account_json` writes it: the gateway exchanges a
    JWT signed with it at `token_uri` for the access token the mock's
    Vertex routes accept."""
    if not MOCK_SERVICE_ACCOUNT_KEY.is_file():
        raise AssertionError(f"{MOCK_SERVICE_ACCOUNT_KEY} is missing: the mock's test service-account key")
    return json.dumps(
        {
            "type": "service_account",
            "project_id": MOCK_SERVICE_ACCOUNT_PROJECT,
            "private_key_id": MOCK_SERVICE_ACCOUNT_KEY_ID,
            "private_key": MOCK_SERVICE_ACCOUNT_KEY.read_text(),
            "client_email": MOCK_SERVICE_ACCOUNT_EMAIL,
            "client_id": MOCK_SERVICE_ACCOUNT_CLIENT_ID,
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/"
            + MOCK_SERVICE_ACCOUNT_EMAIL.replace("@", "%40"),
            "universe_domain": "googleapis.com",
        },
        indent=2,
    )


def gemini_tokens(usage) -> dict[str, int]:
    """The token classes of a Gemini `usageMetadata`, as Google bills them:
    `promptTokenCount` includes the cached tokens, the tool-use prompt is
    input on top of it, and thoughts are output on top of the candidates.

    `usage` is the SDK's `UsageMetadata` (snake_case attributes) or the raw
    JSON object (camelCase keys)."""

    def count(snake: str, camel: str) -> int:
        value = usage.get(camel) if isinstance(usage, dict) else getattr(usage, snake, None)
        return value or 0

    prompt = count("prompt_token_count", "promptTokenCount")
    cached = count("cached_content_token_count", "cachedContentTokenCount")
    tool_prompt = count("tool_use_prompt_token_count", "toolUsePromptTokenCount")
    return {
        "input": prompt - cached + tool_prompt,
        "cached_input": cached,
        "output": count("candidates_token_count", "candidatesTokenCount")
        + count("thoughts_token_count", "thoughtsTokenCount"),
    }


def usd_string(micros: int) -> str:
    """µUSD as the decimal USD string a cap is written in."""
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


@dataclass
class Burst:
    """What a burst of concurrent calls came to: each call's result, or the
    exception it raised."""

    results: list
    errors: list[BaseException]


def run_burst(calls: int, call) -> Burst:
    """Runs `call(index)` on `calls` threads released at the same instant,
    so their reservations race in the gateway."""
    start = threading.Barrier(calls)
    results: list = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        start.wait()
        try:
            result = call(index)
        except BaseException as err:  # noqa: BLE001 - every failure is reported by the test
            with lock:
                errors.append(err)
        else:
            with lock:
                results.append(result)

    threads = [threading.Thread(target=one, args=(index,), name=f"burst-{index}") for index in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a call of the burst hung"
    return Burst(results=results, errors=errors)
