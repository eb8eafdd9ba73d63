// The Node suite's fixtures: the mock provider and the gateway as real
// processes (as tests/sdk/conftest.py starts them), the key's budget around
// a block of calls, and the expected cost of a call computed apart from the
// gateway, from the usage a client saw and the decimal prices in
// config/prices.toml.
//
// Each test file starts its own mock and gateway (`startGateway`, or
// `startGoogleGateway` for the Gemini API and Vertex AI) and runs its tests
// one at a time, so the budget read before a call is an exact baseline for
// it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const PRICES_FILE = join(REPO_ROOT, 'config', 'prices.toml');

const STARTUP_TIMEOUT_MS = 30_000;
const SETTLE_TIMEOUT_MS = 5_000;
// Tracing may print the address bare or as `field=value`, quoted or not.
const LISTENING = /listening on\s+(?:[A-Za-z_]+=)?"?((?:\d{1,3}\.){3}\d{1,3}:\d+|\[[0-9A-Fa-f:]+\]:\d+)/;
// eslint-disable-next-line no-control-regex
const ANSI_ESCAPE = /\x1b\[[0-9;]*m/g;

// The SDKs read base URLs, keys, API versions and extra headers from the
// environment (the Azure clients `AZURE_API_KEY`, `AZURE_RESOURCE_NAME`,
// `AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT`, …; the AWS SDK and
// `@ai-sdk/amazon-bedrock` `AWS_BEARER_TOKEN_BEDROCK`, `AWS_REGION`,
// `AWS_PROFILE`, `AWS_ENDPOINT_URL_*`, `AWS_AUTH_SCHEME_PREFERENCE`, …); a
// developer's real settings must neither leak into nor redirect a test.
const SDK_ENV_PREFIXES = ['OPENAI_', 'ANTHROPIC_', 'AZURE_', 'AWS_'];
const isSdkSetting = (name) => SDK_ENV_PREFIXES.some((prefix) => name.startsWith(prefix));
for (const name of Object.keys(process.env)) {
  if (isSdkSetting(name)) delete process.env[name];
}
// Nor may a developer's ~/.aws files (profiles, regions, endpoints), and
// no AWS client may look for credentials at the instance metadata service
// (these names are kept from the child processes with the rest).
process.env.AWS_CONFIG_FILE = join(tmpdir(), 'tollgate-node-no-aws-config');
process.env.AWS_SHARED_CREDENTIALS_FILE = join(tmpdir(), 'tollgate-node-no-aws-credentials');
process.env.AWS_EC2_METADATA_DISABLED = 'true';
// The Google SDKs and google-auth-library read keys, projects, locations
// and credentials from the environment too.
const GOOGLE_ENV_PREFIXES = ['GOOGLE_', 'GEMINI_', 'CLOUD_ML_', 'GCLOUD_'];
for (const name of Object.keys(process.env)) {
  if (GOOGLE_ENV_PREFIXES.some((prefix) => name.startsWith(prefix))) delete process.env[name];
}

/** The binary under test: `TOLLGATE_BIN` (relative to the repo root when
 * relative), else the debug build. */
export function tollgateBin() {
  const configured = process.env.TOLLGATE_BIN || 'target/debug/tollgate';
  return isAbsolute(configured) ? configured : join(REPO_ROOT, configured);
}

/** A tollgate subprocess whose output is kept for failure messages. */
class TollgateProcess {
  constructor(name, args, env) {
    this.name = name;
    this.args = args;
    this.lines = [];
    this.address = null;
    this.child = spawn(args[0], args.slice(1), { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.exited = new Promise((resolveExit) => this.child.once('exit', (code, signal) => resolveExit({ code, signal })));
    this.bound = new Promise((resolveBound) => {
      this.child.once('exit', () => resolveBound(null));
      let pending = '';
      const read = (chunk) => {
        pending += chunk.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop();
        for (const raw of lines) {
          const line = raw.replace(ANSI_ESCAPE, '');
          this.lines.push(line);
          const found = this.address === null && LISTENING.exec(line);
          if (found) {
            this.address = found[1];
            resolveBound(this.address);
          }
        }
      };
      this.child.stdout.on('data', read);
      this.child.stderr.on('data', read);
    });
  }

  output() {
    return this.lines.join('\n');
  }

  async waitListening() {
    let timer;
    const timeout = new Promise((resolveTimeout) => {
      timer = setTimeout(() => resolveTimeout(null), STARTUP_TIMEOUT_MS);
    });
    const address = await Promise.race([this.bound, timeout]);
    clearTimeout(timer);
    if (address) return address;
    await this.stop();
    throw new Error(
      `${this.name} did not log 'listening on'.\ncommand: ${this.args.join(' ')}\n--- output ---\n${this.output() || '(none)'}`,
    );
  }

  async stop() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
      await this.exited;
      clearTimeout(timer);
    }
  }
}

function childEnv(extra) {
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!isSdkSetting(name)) env[name] = value;
  }
  return { ...env, RUST_LOG: process.env.TOLLGATE_TEST_LOG || 'info', NO_COLOR: '1', ...extra };
}

const sha256 = (raw) => createHash('sha256').update(raw).digest('hex');

/** The gateway's azure provider's deployments: each with the priced model
 * the gateway bills it as (`priced`) and the dated model the mock's answers
 * name instead (`served`), as Azure's name the model a deployment runs. */
export const AZURE_DEPLOYMENTS = {
  'prod-4o': { priced: 'gpt-4o', served: 'gpt-4o-2024-08-06' },
  mini: { priced: 'gpt-4o-mini', served: 'gpt-4o-mini-2024-07-18' },
};

function config(mockAddress, key, tinyKey) {
  const deployments = Object.entries(AZURE_DEPLOYMENTS)
    .map(([name, { priced }]) => `"${name}" = "${priced}"`)
    .join(', ');
  return `\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "${PRICES_FILE}"

# Azure OpenAI: the mock plays the resource on its /openai/ routes.
[[providers]]
name = "azure"
kind = "azure"
base_url = "http://${mockAddress}"
api_key_env = "TG_TEST_AZURE_KEY"
deployments = { ${deployments} }

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://${mockAddress}"
api_key_env = "TG_TEST_OPENAI_KEY"
service_tier_default = "priority"  # the mock plays OpenAI itself
models = ["gpt-*", "text-embedding-*"]

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "http://${mockAddress}"
api_key_env = "TG_TEST_ANTHROPIC_KEY"
models = ["claude-*"]

[[orgs]]
id = "node"
cap_usd = "100.00"
period = "total"

[[keys]]
id = "node-key"
org = "node"
key_sha256 = "${sha256(key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: 10 µUSD, below every call's estimate.
[[keys]]
id = "node-tiny-key"
key_sha256 = "${sha256(tinyKey)}"
cap_usd = "0.000010"
period = "day"
`;
}

/** Starts a mock provider and a gateway in front of it (OpenAI, Anthropic
 * and Azure OpenAI, whose deployments are `AZURE_DEPLOYMENTS`). The mock
 * accepts only the provider credential, so a successful call proves the
 * gateway swapped the client's key for it. The answer has `key`, `tinyKey`
 * (every call denied) and `adminKey`. */
export async function startGateway() {
  const binary = tollgateBin();
  assert.ok(existsSync(binary), `${binary} does not exist: run \`cargo build\` (or set TOLLGATE_BIN)`);
  const providerSecret = `sk-provider-${randomBytes(16).toString('hex')}`;
  const key = `tg-node-${randomBytes(16).toString('hex')}`;
  const tinyKey = `tg-node-tiny-${randomBytes(16).toString('hex')}`;
  const adminKey = `tg-admin-${randomBytes(16).toString('hex')}`;
  const azureDeployments = Object.entries(AZURE_DEPLOYMENTS).flatMap(([name, { served }]) => [
    '--azure-deployment',
    `${name}=${served}`,
  ]);

  const mock = new TollgateProcess(
    'mock-upstream',
    [binary, 'mock-upstream', '--listen', '127.0.0.1:0', '--expect-key', providerSecret, ...azureDeployments],
    childEnv({}),
  );
  const mockAddress = await mock.waitListening();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-node-'));
  const configPath = join(dir, 'tollgate.toml');
  writeFileSync(configPath, config(mockAddress, key, tinyKey));
  const gateway = new TollgateProcess(
    'gateway',
    [binary, 'serve', '--config', configPath],
    childEnv({
      TG_TEST_OPENAI_KEY: providerSecret,
      TG_TEST_ANTHROPIC_KEY: providerSecret,
      TG_TEST_AZURE_KEY: providerSecret,
      TOLLGATE_ADMIN_KEY: adminKey,
    }),
  );
  let address;
  try {
    address = await gateway.waitListening();
  } catch (error) {
    await mock.stop();
    throw error;
  }
  return {
    url: `http://${address}`,
    key,
    keyId: 'node-key',
    tinyKey,
    tinyKeyId: 'node-tiny-key',
    adminKey,
    logs: () => `--- gateway ---\n${gateway.output()}\n--- mock-upstream ---\n${mock.output()}`,
    async stop() {
      await gateway.stop();
      await mock.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// === the budget ===

export async function readBudget(gateway) {
  const response = await fetch(`${gateway.url}/v1/budget`, {
    headers: { Authorization: `Bearer ${gateway.key}` },
  });
  const body = await response.text();
  assert.equal(response.status, 200, `GET /v1/budget answered ${response.status}: ${body}`);
  return JSON.parse(body);
}

/** The key's (and its org's) counters around a block of calls. */
export class SpendMeter {
  constructor(gateway) {
    this.gateway = gateway;
  }

  /** Takes the baseline; call before the calls to be charged. */
  async restart() {
    this.before = await readBudget(this.gateway);
    return this;
  }

  /** The budget once the calls' reservations are settled. */
  async after() {
    const deadline = Date.now() + SETTLE_TIMEOUT_MS;
    for (;;) {
      const budget = await readBudget(this.gateway);
      const settled =
        budget.key.reserved_usd_micros <= this.before.key.reserved_usd_micros &&
        (budget.org?.reserved_usd_micros ?? 0) <= (this.before.org?.reserved_usd_micros ?? 0);
      if (settled || Date.now() >= deadline) return budget;
      await new Promise((wake) => setTimeout(wake, 50));
    }
  }

  /** Exactly `expected` µUSD was charged to the key and its org, and no
   * reservation was left open. */
  async assertCharged(expected) {
    const after = await this.after();
    const { before } = this;
    assert.equal(after.key.period_id, before.key.period_id, 'the budget period rolled over during the test');
    assert.equal(after.key.reserved_usd_micros - before.key.reserved_usd_micros, 0, 'reservation left open on the key');
    const charged = after.key.spent_usd_micros - before.key.spent_usd_micros;
    assert.equal(charged, expected, `key charged ${charged} µUSD, usage prices at ${expected} µUSD`);
    assert.equal(after.org.reserved_usd_micros - before.org.reserved_usd_micros, 0, 'reservation left open on the org');
    assert.equal(after.org.spent_usd_micros - before.org.spent_usd_micros, expected, 'org charged differently');
    return after;
  }
}

/** A meter whose baseline is taken now. */
export async function meter(gateway) {
  return new SpendMeter(gateway).restart();
}

/** What the ledger recorded for the gateway's key (`keyId`), by model
 * (`GET /admin/v1/spend?group_by=model`): `{model: {calls, cost}}`. From
 * two days back, so a test run across midnight (UTC) or a month's end
 * still sees its calls. */
export async function spendByModel(gateway) {
  const since = new Date(Date.now() - 2 * 86_400_000).toISOString().slice(0, 10);
  const response = await fetch(
    `${gateway.url}/admin/v1/spend?group_by=model&key=${encodeURIComponent(gateway.keyId)}&from=${since}`,
    { headers: { Authorization: `Bearer ${gateway.adminKey}` } },
  );
  const text = await response.text();
  assert.equal(response.status, 200, `GET /admin/v1/spend answered ${response.status}: ${text}`);
  return Object.fromEntries(
    JSON.parse(text).rows.map((row) => [row.group, { calls: row.calls, cost: row.cost_usd_micros }]),
  );
}

/** The models billed between two `spendByModel` reports, with the calls
 * and µUSD of each. */
export function spendDelta(before, after) {
  const changed = {};
  for (const [model, { calls, cost }] of Object.entries(after)) {
    const was = before[model] ?? { calls: 0, cost: 0 };
    if (calls !== was.calls || cost !== was.cost) changed[model] = { calls: calls - was.calls, cost: cost - was.cost };
  }
  return changed;
}

// === expected costs ===

const MICRO_DIGITS = 6;

/** A decimal string as an exact count of millionths. */
function millionths(decimal) {
  const match = /^(\d+)(?:\.(\d{1,6}))?$/.exec(String(decimal).trim());
  assert.ok(match, `price ${decimal} is not a decimal with at most ${MICRO_DIGITS} places`);
  return BigInt(match[1]) * 10n ** BigInt(MICRO_DIGITS) + BigInt((match[2] || '').padEnd(MICRO_DIGITS, '0'));
}

/** The per-token prices of config/prices.toml, in millionths of a µUSD: the
 * `*_per_mtok` string fields of each `[models."NAME"]` table. */
function loadPrices() {
  const models = {};
  let current = null;
  for (const line of readFileSync(PRICES_FILE, 'utf8').split('\n')) {
    const table = /^\s*\[\s*models\."([^"]+)"\s*\]/.exec(line);
    if (table) {
      current = models[table[1]] = {};
      continue;
    }
    if (/^\s*\[/.test(line)) {
      current = null;
      continue;
    }
    const field = /^\s*(\w+_per_mtok)\s*=\s*"([^"]+)"/.exec(line);
    if (current && field) current[field[1]] = millionths(field[2]);
  }
  return models;
}

const PRICES = loadPrices();

/** Σ tokens × price, rounded up to a whole µUSD once per call. */
export function cost(model, { input = 0, cachedInput = 0, cacheWrite = 0, output = 0 }) {
  const price = PRICES[model];
  assert.ok(price, `${model} is not in ${PRICES_FILE}`);
  const inputPrice = price.input_per_mtok;
  const exact =
    BigInt(input) * inputPrice +
    BigInt(cachedInput) * (price.cached_input_per_mtok ?? inputPrice) +
    BigInt(cacheWrite) * (price.cache_write_per_mtok ?? inputPrice) +
    BigInt(output) * price.output_per_mtok;
  const scale = 10n ** BigInt(MICRO_DIGITS);
  return Number((exact + scale - 1n) / scale);
}

/** An OpenAI chat completion's `usage`. */
export function chatCost(model, usage) {
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  return cost(model, { input: usage.prompt_tokens - cached, cachedInput: cached, output: usage.completion_tokens });
}

/** An OpenAI Responses `usage`. */
export function responsesCost(model, usage) {
  const cached = usage.input_tokens_details?.cached_tokens ?? 0;
  return cost(model, { input: usage.input_tokens - cached, cachedInput: cached, output: usage.output_tokens });
}

/** An Anthropic message's `usage`. */
export function messagesCost(model, usage) {
  return cost(model, {
    input: usage.input_tokens ?? 0,
    cachedInput: usage.cache_read_input_tokens ?? 0,
    cacheWrite: usage.cache_creation_input_tokens ?? 0,
    output: usage.output_tokens ?? 0,
  });
}

/** A conversation whose reply the mock makes exactly `words` tokens long. */
export function ask(words, extra = '') {
  return `Name a few colours, please. ${extra} mock:tokens=${words}`;
}

export const words = (text) => text.split(/\s+/).filter(Boolean).length;

// === Google: the Gemini API and Vertex AI ===

// The project and location the gateway puts in every Vertex path, and the
// ones the clients name instead: the gateway must replace both.
export const VERTEX_PROJECT = 'tollgate-test';
export const VERTEX_LOCATION = 'us-central1';
export const CLIENT_PROJECT = 'client-project';
export const CLIENT_LOCATION = 'europe-west4';

// The mock's test service account (a key made for the tests, public in the
// repository): the gateway signs its token requests with it and the mock's
// `/token` endpoint checks them against the public half.
const MOCK_SERVICE_ACCOUNT_KEY = join(REPO_ROOT, 'mock', 'fixtures', 'vertex-service-account-key.pem');
// These match mock/src/token.rs: the mock refuses a grant whose `iss` is
// another account or whose `kid` names another key.
const MOCK_SERVICE_ACCOUNT_EMAIL = 'gateway@tollgate-test.iam.gserviceaccount.com';
const MOCK_SERVICE_ACCOUNT_KEY_ID = '5e1f0c2b9a7d4e3f8b6a1c0d9e8f7a6b5c4d3e2f';
const MOCK_SERVICE_ACCOUNT_CLIENT_ID = '108126429573806511234';

/** A Google service-account file for the mock's test key, as
 * `tollgate_mock::service_account_json` writes it. */
export function serviceAccountJson(tokenUri) {
  assert.ok(existsSync(MOCK_SERVICE_ACCOUNT_KEY), `${MOCK_SERVICE_ACCOUNT_KEY} is missing: the mock's test key`);
  return JSON.stringify(
    {
      type: 'service_account',
      project_id: VERTEX_PROJECT,
      private_key_id: MOCK_SERVICE_ACCOUNT_KEY_ID,
      private_key: readFileSync(MOCK_SERVICE_ACCOUNT_KEY, 'utf8'),
      client_email: MOCK_SERVICE_ACCOUNT_EMAIL,
      client_id: MOCK_SERVICE_ACCOUNT_CLIENT_ID,
      auth_uri: 'https://accounts.google.com/o/oauth2/auth',
      token_uri: tokenUri,
      auth_provider_x509_cert_url: 'https://www.googleapis.com/oauth2/v1/certs',
      client_x509_cert_url: `https://www.googleapis.com/robot/v1/metadata/x509/${encodeURIComponent(
        MOCK_SERVICE_ACCOUNT_EMAIL,
      )}`,
      universe_domain: 'googleapis.com',
    },
    null,
    2,
  );
}

function googleConfig(mockAddress, credentialsFile, key, tinyKey) {
  return `\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "${PRICES_FILE}"

[[providers]]
name = "gemini"
kind = "gemini"
base_url = "http://${mockAddress}"
api_key_env = "TG_TEST_GEMINI_KEY"
models = ["gemini-*"]

[[providers]]
name = "vertex"
kind = "vertex"
base_url = "http://${mockAddress}"
project = "${VERTEX_PROJECT}"
location = "${VERTEX_LOCATION}"
credentials_file = "${credentialsFile}"
models = ["gemini-*", "claude-*"]

[[orgs]]
id = "node-google"
cap_usd = "100.00"
period = "total"

[[keys]]
id = "node-google-key"
org = "node-google"
key_sha256 = "${sha256(key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: 10 µUSD, below every call's estimate.
[[keys]]
id = "node-google-tiny-key"
key_sha256 = "${sha256(tinyKey)}"
cap_usd = "0.000010"
period = "day"
`;
}

/** Starts a mock provider and a gateway in front of its Gemini API and
 * Vertex AI. The mock's Gemini routes accept only the provider key and its
 * Vertex routes only a token its own `/token` endpoint issued, so a
 * successful call proves the gateway swapped the client's credential. The
 * answer has `tinyKey` (every call denied) and `adminKey`. */
export async function startGoogleGateway() {
  const binary = tollgateBin();
  assert.ok(existsSync(binary), `${binary} does not exist: run \`cargo build\` (or set TOLLGATE_BIN)`);
  const providerSecret = `gm-provider-${randomBytes(16).toString('hex')}`;
  const key = `tg-node-google-${randomBytes(16).toString('hex')}`;
  const tinyKey = `tg-node-google-tiny-${randomBytes(16).toString('hex')}`;
  const adminKey = `tg-admin-${randomBytes(16).toString('hex')}`;

  const mock = new TollgateProcess(
    'mock-upstream',
    [binary, 'mock-upstream', '--listen', '127.0.0.1:0', '--expect-key', providerSecret],
    childEnv({}),
  );
  const mockAddress = await mock.waitListening();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-node-google-'));
  const credentialsFile = join(dir, 'service-account.json');
  const configPath = join(dir, 'tollgate.toml');
  let gateway;
  let address;
  try {
    writeFileSync(credentialsFile, serviceAccountJson(`http://${mockAddress}/token`));
    writeFileSync(configPath, googleConfig(mockAddress, credentialsFile, key, tinyKey));
    gateway = new TollgateProcess(
      'gateway',
      [binary, 'serve', '--config', configPath],
      childEnv({ TG_TEST_GEMINI_KEY: providerSecret, TOLLGATE_ADMIN_KEY: adminKey }),
    );
    address = await gateway.waitListening();
  } catch (error) {
    await mock.stop();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `http://${address}`,
    key,
    tinyKey,
    adminKey,
    logs: () => `--- gateway ---\n${gateway.output()}\n--- mock-upstream ---\n${mock.output()}`,
    async stop() {
      await gateway.stop();
      await mock.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A key made through the admin API (`body`: `cap_usd`, `period`, …); its
 * secret. */
export async function createKey(gateway, body) {
  const response = await fetch(`${gateway.url}/admin/v1/keys`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${gateway.adminKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.equal(response.status, 201, `POST /admin/v1/keys answered ${response.status}: ${text}`);
  return JSON.parse(text).secret;
}

/** The key's budget (`{url, key}`) once no call holds a reservation on it. */
export async function settledBudget(gateway) {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  for (;;) {
    const budget = await readBudget(gateway);
    if (budget.key.reserved_usd_micros === 0 || Date.now() >= deadline) return budget;
    await new Promise((wake) => setTimeout(wake, 50));
  }
}

/** A `fetch` for an SDK's `fetch` option that counts the requests the SDK
 * really sends, retries included: each one's URL in `requests`, its
 * headers (lower-case names) in `headers`. */
export function countingFetch() {
  const requests = [];
  const headers = [];
  const counted = (url, init) => {
    requests.push(String(url));
    headers.push(Object.fromEntries(new Headers(init?.headers ?? {}).entries()));
    return fetch(url, init);
  };
  return { fetch: counted, requests, headers };
}

/** µUSD as the decimal USD string a cap is written in. */
export function usdString(micros) {
  return `${Math.floor(micros / 1e6)}.${String(micros % 1e6).padStart(6, '0')}`;
}

/** A Gemini `usageMetadata` (camelCase, as the API sends it and the AI SDK
 * keeps it in `usage.raw`) priced as Google bills it: the prompt count
 * includes the cached tokens, the tool-use prompt is input on top of it,
 * and thoughts are output on top of the candidates. */
export function geminiCost(model, usage) {
  assert.ok(usage, 'no usageMetadata to price');
  const prompt = usage.promptTokenCount ?? 0;
  const cached = usage.cachedContentTokenCount ?? 0;
  return cost(model, {
    input: prompt - cached + (usage.toolUsePromptTokenCount ?? 0),
    cachedInput: cached,
    output: (usage.candidatesTokenCount ?? 0) + (usage.thoughtsTokenCount ?? 0),
  });
}

// === Amazon Bedrock ===

/** The model a Claude call on Bedrock is priced and recorded as, and the
 * cross-region inference profile that runs it (billed as the model). */
export const BEDROCK_HAIKU = 'anthropic.claude-haiku-4-5-20251001-v1:0';
export const BEDROCK_HAIKU_PROFILE = 'us.anthropic.claude-haiku-4-5-20251001-v1:0';
export const BEDROCK_REGION = 'us-east-1';

function bedrockConfig(mockAddress, key, tinyKey) {
  return `\
[server]
listen = "127.0.0.1:0"

[store]
backend = "memory"

[prices]
file = "${PRICES_FILE}"

# SigV4 with temporary credentials (a session token too), which the mock
# verifies on every call.
[[providers]]
name = "bedrock"
kind = "bedrock"
base_url = "http://${mockAddress}"
region = "${BEDROCK_REGION}"
access_key_id_env = "TG_TEST_AWS_ACCESS_KEY_ID"
secret_access_key_env = "TG_TEST_AWS_SECRET_ACCESS_KEY"
session_token_env = "TG_TEST_AWS_SESSION_TOKEN"
models = ["anthropic.claude-*"]

[[orgs]]
id = "node-bedrock"
cap_usd = "100.00"
period = "total"

[[keys]]
id = "node-bedrock-key"
org = "node-bedrock"
key_sha256 = "${sha256(key)}"
cap_usd = "10.00"
period = "total"

# No org, a daily period: 10 µUSD, below every call's estimate.
[[keys]]
id = "node-bedrock-tiny-key"
key_sha256 = "${sha256(tinyKey)}"
cap_usd = "0.000010"
period = "day"
`;
}

/** Starts a mock Bedrock Runtime and a gateway in front of it whose
 * bedrock provider signs with SigV4 (and a session token). The mock takes
 * no bearer token, only a signature by those credentials, which it
 * verifies, so an answered call proves the gateway signed it in the
 * client's stead. The answer has `key` (in an org), `tinyKey` (every call
 * denied) and `adminKey`; `url` is the plain listener, which speaks HTTP/1.1
 * and h2c. */
export async function startBedrockGateway() {
  const binary = tollgateBin();
  assert.ok(existsSync(binary), `${binary} does not exist: run \`cargo build\` (or set TOLLGATE_BIN)`);
  const accessKeyId = `AKIDTG${randomBytes(7).toString('hex').toUpperCase()}`;
  const secretAccessKey = randomBytes(20).toString('hex');
  const sessionToken = `tg-session-${randomBytes(24).toString('hex')}`;
  const key = `tg-node-bedrock-${randomBytes(16).toString('hex')}`;
  const tinyKey = `tg-node-bedrock-tiny-${randomBytes(16).toString('hex')}`;
  const adminKey = `tg-admin-${randomBytes(16).toString('hex')}`;

  const mock = new TollgateProcess(
    'mock-upstream',
    [binary, 'mock-upstream', '--listen', '127.0.0.1:0', '--aws-credentials', `${accessKeyId}:${secretAccessKey}`],
    childEnv({}),
  );
  const mockAddress = await mock.waitListening();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-node-bedrock-'));
  const configPath = join(dir, 'tollgate.toml');
  let gateway;
  let address;
  try {
    writeFileSync(configPath, bedrockConfig(mockAddress, key, tinyKey));
    gateway = new TollgateProcess(
      'gateway',
      [binary, 'serve', '--config', configPath],
      childEnv({
        TG_TEST_AWS_ACCESS_KEY_ID: accessKeyId,
        TG_TEST_AWS_SECRET_ACCESS_KEY: secretAccessKey,
        TG_TEST_AWS_SESSION_TOKEN: sessionToken,
        TOLLGATE_ADMIN_KEY: adminKey,
      }),
    );
    address = await gateway.waitListening();
  } catch (error) {
    await mock.stop();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `http://${address}`,
    key,
    keyId: 'node-bedrock-key',
    tinyKey,
    tinyKeyId: 'node-bedrock-tiny-key',
    adminKey,
    logs: () => `--- gateway ---\n${gateway.output()}\n--- mock-upstream ---\n${mock.output()}`,
    async stop() {
      await gateway.stop();
      await mock.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Bedrock Converse `usage` (`inputTokens` without the cache reads and
 * writes, which come apart); the tests write no hour-long cache. */
export function converseCost(model, usage) {
  assert.ok(usage, 'no Converse usage to price');
  assert.ok(
    (usage.cacheDetails ?? []).every((detail) => detail.ttl === '5m'),
    `an hour-long cache write: ${JSON.stringify(usage)}`,
  );
  return cost(model, {
    input: usage.inputTokens,
    cachedInput: usage.cacheReadInputTokens ?? 0,
    cacheWrite: usage.cacheWriteInputTokens ?? 0,
    output: usage.outputTokens,
  });
}
