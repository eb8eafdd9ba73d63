"""Fixtures of the console's browser test: the mock provider and the gateway
as real processes (as in tests/sdk), and Debian's headless Chromium driven
by Selenium, installed with apt-get when missing.

Screenshots go to target/console-screenshots/ (or CONSOLE_SCREENSHOTS).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The process helpers are the SDK suite's.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))

from support import PRICES_FILE, REPO_ROOT, StartupError, TollgateProcess, admin_call, tollgate_bin  # noqa: E402

CONFIG_KEY_ID = "config-key"
LOG_TAIL_LINES = 40

_processes: list[TollgateProcess] = []


def pytest_configure(config):
    # The SDK reads base URLs and keys from the environment; a developer's
    # real settings must neither leak into nor redirect the test.
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
    admin_key: str

    def admin(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """An admin API call outside the browser: its status and JSON body."""
        return admin_call(self.url, self.admin_key, method, path, body)


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


def _config(mock_address: str) -> str:
    config_secret = hashlib.sha256(secrets.token_hex(16).encode()).hexdigest()
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
service_tier_default = "priority"  # the mock plays OpenAI itself
models = ["gpt-*"]

[[orgs]]
id = "acme"
cap_usd = "100.00"
period = "month"

# Listed by the console as "config": its actions are refused by the API.
[[keys]]
id = "{CONFIG_KEY_ID}"
org = "acme"
key_sha256 = "{config_secret}"
cap_usd = "10.00"
period = "day"
"""


@pytest.fixture(scope="session")
def gateway(tmp_path_factory) -> Iterator[Gateway]:
    binary = tollgate_bin()
    if not binary.is_file():
        pytest.fail(f"{binary} does not exist: run `cargo build` (or set TOLLGATE_BIN)", pytrace=False)
    provider_secret = f"sk-provider-{secrets.token_hex(16)}"
    admin_key = f"tg-admin-{secrets.token_hex(16)}"
    mock, mock_address = _start(
        "mock-upstream",
        [str(binary), "mock-upstream", "--listen", "127.0.0.1:0", "--expect-key", provider_secret],
        _child_env({}),
    )
    config_path = tmp_path_factory.mktemp("tollgate") / "tollgate.toml"
    config_path.write_text(_config(mock_address))
    try:
        server, address = _start(
            "gateway",
            [str(binary), "serve", "--config", str(config_path)],
            _child_env({"TG_TEST_OPENAI_KEY": provider_secret, "TOLLGATE_ADMIN_KEY": admin_key}),
        )
    except BaseException:
        mock.stop()
        raise
    _processes[:] = [server, mock]
    try:
        yield Gateway(url=f"http://{address}", admin_key=admin_key)
    finally:
        _processes.clear()
        server.stop()
        mock.stop()


# === the browser ===

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def _install_chromium() -> str | None:
    """Installs Debian's chromium and chromium-driver when missing; the reason
    it could not, or None."""
    if Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file():
        return None
    if shutil.which("apt-get") is None:
        return "chromium is not installed and there is no apt-get to install it"
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            return "chromium is not installed, and installing it needs root or sudo"
        sudo = ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"]):
        done = subprocess.run(sudo + command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            return f"`{' '.join(command)}` failed: {done.stderr.strip()[-500:]}"
    if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
        return "apt-get installed chromium but /usr/bin/chromium or /usr/bin/chromedriver is missing"
    return None


@pytest.fixture(scope="session")
def screenshots() -> Path:
    configured = os.environ.get("CONSOLE_SCREENSHOTS")
    path = Path(configured) if configured else REPO_ROOT / "target" / "console-screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def driver():
    why = _install_chromium()
    if why is not None:
        pytest.skip(f"no browser for the console test: {why}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium would otherwise try to download a browser and a driver.
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield browser
    finally:
        browser.quit()
