// Amazon Bedrock through the gateway with the AWS SDK's
// `@aws-sdk/client-bedrock-runtime` (over HTTP/2, its default: h2c on the
// gateway's plain listener) and the Vercel AI SDK's `@ai-sdk/amazon-bedrock`
// (fetch, HTTP/1.1), set up as an agent would with a Bedrock API key: the
// gateway as the endpoint, the gateway key as the bearer token. Every call,
// through a cross-region inference profile or the model's own id, is charged
// exactly the price of the usage the client decoded, and the ledger records
// it as the model without the profile's prefix. The gateway signs its own
// calls to the mock with SigV4 and a session token, which the mock
// verifies. Refusals are Bedrock's exceptions, named by `x-amzn-ErrorType`;
// a budget refusal is a 402 BudgetExceededException that neither SDK
// resends, and costs nothing.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createAmazonBedrock } from '@ai-sdk/amazon-bedrock';
import {
  BedrockRuntimeClient,
  ConverseCommand,
  ConverseStreamCommand,
  InvokeModelCommand,
  InvokeModelWithResponseStreamCommand,
  ResourceNotFoundException,
  ValidationException,
} from '@aws-sdk/client-bedrock-runtime';
import { APICallError, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';

import {
  BEDROCK_HAIKU as HAIKU,
  BEDROCK_HAIKU_PROFILE as PROFILE,
  BEDROCK_REGION,
  ask,
  converseCost,
  countingFetch,
  meter,
  messagesCost,
  readBudget,
  settledBudget,
  spendByModel,
  spendDelta,
  startBedrockGateway,
  words,
} from './harness.js';

const ANTHROPIC_VERSION = 'bedrock-2023-05-31';
const MAX_TOKENS = 256;
const UNPRICED = 'anthropic.claude-nonesuch-20990101-v1:0';
const IDS = [
  ['a profile', PROFILE],
  ['the model', HAIKU],
];

let gateway;
// The AWS SDK's clients, closed (their HTTP/2 sessions with them) at the end.
const clients = [];

before(async () => {
  gateway = await startBedrockGateway();
});

after(async () => {
  for (const client of clients) client.destroy();
  await gateway?.stop();
});

/** The path the SDKs send: the id percent-encoded (`:` as `%3A`). */
const wirePath = (modelId, operation) => `/model/${encodeURIComponent(modelId)}/${operation}`;

/** Counts the requests a `BedrockRuntimeClient` really sends, retries
 * included (a middleware after the retry one, run once per attempt): each
 * one's path and headers (lower-case names). */
function countAttempts(client) {
  const counter = { paths: [], headers: [] };
  client.middlewareStack.add(
    (next) => async (args) => {
      counter.paths.push(args.request.path);
      counter.headers.push(
        Object.fromEntries(Object.entries(args.request.headers).map(([name, value]) => [name.toLowerCase(), value])),
      );
      return next(args);
    },
    { step: 'deserialize', name: 'tollgateAttemptCounter' },
  );
  return counter;
}

/** The AWS SDK's client as Bedrock's docs set up an API key, the gateway
 * as its endpoint; `counter` counts what it sends. */
function runtime(token = gateway.key) {
  const client = new BedrockRuntimeClient({
    region: BEDROCK_REGION,
    endpoint: gateway.url,
    token: { token },
    authSchemePreference: ['httpBearerAuth'],
  });
  clients.push(client);
  return { client, counter: countAttempts(client) };
}

/** The one request a client sent: to `path`, with the key as a bearer
 * token and no SigV4 signature. */
function assertSent(counter, key, path) {
  assert.deepEqual(counter.paths, [path]);
  const headers = counter.headers[0];
  assert.equal(headers.authorization, `Bearer ${key}`);
  assert.equal(headers['x-amz-date'], undefined, 'not signed');
}

const user = (text) => ({ role: 'user', content: [{ text }] });

function invokeBody(tokens, fields = {}) {
  return JSON.stringify({
    anthropic_version: ANTHROPIC_VERSION,
    max_tokens: MAX_TOKENS,
    messages: [{ role: 'user', content: ask(tokens) }],
    ...fields,
  });
}

const decode = (bytes) => JSON.parse(new TextDecoder().decode(bytes));

/** The ledger billed `model` alone since the `before` report: `calls`
 * calls for `expected` µUSD. */
async function assertLedger(before, model, calls, expected) {
  assert.deepEqual(spendDelta(before, await spendByModel(gateway)), { [model]: { calls, cost: expected } });
}

// === @aws-sdk/client-bedrock-runtime ===

test('BedrockRuntimeClient speaks HTTP/2 to the gateway', () => {
  const { client } = runtime();
  assert.equal(client.config.requestHandler.constructor.name, 'NodeHttp2Handler');
});

for (const [name, modelId] of IDS) {
  test(`ConverseCommand through ${name} is charged as the model`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const { client, counter } = runtime();
    const response = await client.send(
      new ConverseCommand({
        modelId,
        system: [{ text: 'You are terse.' }],
        messages: [user(ask(9))],
        inferenceConfig: { maxTokens: MAX_TOKENS },
      }),
    );

    assertSent(counter, gateway.key, wirePath(modelId, 'converse'));
    // HTTP/2's pseudo-header: the request went over h2c.
    assert.ok(counter.headers[0][':authority'], 'not an HTTP/2 request');
    assert.equal(response.$metadata.httpStatusCode, 200);
    assert.equal(response.$metadata.attempts, 1);
    assert.equal(response.stopReason, 'end_turn');
    assert.equal(response.output.message.role, 'assistant');
    assert.equal(words(response.output.message.content[0].text), 9);
    assert.equal(response.usage.outputTokens, 9);
    const charged = converseCost(HAIKU, response.usage);
    assert.ok(charged > 0);
    await spend.assertCharged(charged);
    await assertLedger(ledger, HAIKU, 1, charged);
  });

  test(`ConverseStreamCommand through ${name} streams Converse's events and is charged`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const { client, counter } = runtime();
    const response = await client.send(
      new ConverseStreamCommand({ modelId, messages: [user(ask(7))], inferenceConfig: { maxTokens: MAX_TOKENS } }),
    );
    const events = [];
    for await (const event of response.stream) events.push(event);

    assertSent(counter, gateway.key, wirePath(modelId, 'converse-stream'));
    const kinds = events.map((event) => Object.keys(event).find((key) => event[key] !== undefined));
    assert.equal(kinds[0], 'messageStart', `${kinds}`);
    assert.deepEqual(kinds.slice(-3), ['contentBlockStop', 'messageStop', 'metadata'], `${kinds}`);
    const text = events
      .filter((event) => event.contentBlockDelta)
      .map((event) => event.contentBlockDelta.delta.text)
      .join('');
    assert.equal(words(text), 7);
    assert.equal(events.at(-2).messageStop.stopReason, 'end_turn');
    const { usage } = events.at(-1).metadata;
    assert.equal(usage.outputTokens, 7);
    const charged = converseCost(HAIKU, usage);
    assert.ok(charged > 0);
    await spend.assertCharged(charged);
    await assertLedger(ledger, HAIKU, 1, charged);
  });

  test(`InvokeModelCommand through ${name} is Anthropic's Messages, charged as the model`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const { client, counter } = runtime();
    const response = await client.send(
      new InvokeModelCommand({
        modelId,
        body: invokeBody(8),
        contentType: 'application/json',
        accept: 'application/json',
      }),
    );
    const answer = decode(response.body);

    assertSent(counter, gateway.key, wirePath(modelId, 'invoke'));
    assert.equal(answer.type, 'message');
    assert.equal(answer.stop_reason, 'end_turn');
    assert.equal(words(answer.content[0].text), 8);
    assert.equal(answer.usage.output_tokens, 8);
    const charged = messagesCost(HAIKU, answer.usage);
    assert.ok(charged > 0);
    await spend.assertCharged(charged);
    await assertLedger(ledger, HAIKU, 1, charged);
  });
}

test('InvokeModelWithResponseStreamCommand streams Anthropic events in chunks and is charged', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const { client, counter } = runtime();
  const response = await client.send(
    new InvokeModelWithResponseStreamCommand({ modelId: PROFILE, body: invokeBody(6) }),
  );
  const events = [];
  for await (const frame of response.body) {
    assert.ok(frame.chunk, `not a chunk: ${JSON.stringify(frame)}`);
    events.push(decode(frame.chunk.bytes));
  }

  assertSent(counter, gateway.key, wirePath(PROFILE, 'invoke-with-response-stream'));
  const kinds = events.map((event) => event.type);
  assert.equal(kinds[0], 'message_start', `${kinds}`);
  assert.equal(kinds.at(-1), 'message_stop', `${kinds}`);
  const text = events
    .filter((event) => event.type === 'content_block_delta')
    .map((event) => event.delta.text)
    .join('');
  assert.equal(words(text), 6);
  const delta = events.find((event) => event.type === 'message_delta');
  const usage = { ...events[0].message.usage, output_tokens: delta.usage.output_tokens };
  assert.equal(usage.output_tokens, 6);
  assert.equal(events.at(-1)['amazon-bedrock-invocationMetrics'].outputTokenCount, 6);
  const charged = messagesCost(HAIKU, usage);
  await spend.assertCharged(charged);
  await assertLedger(ledger, HAIKU, 1, charged);
});

// === @ai-sdk/amazon-bedrock ===

function bedrock(apiKey = gateway.key, options = {}) {
  return createAmazonBedrock({ region: BEDROCK_REGION, apiKey, baseURL: gateway.url, ...options });
}

test('@ai-sdk/amazon-bedrock generateText through a profile is charged as the model', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const counter = countingFetch();
  const result = await generateText({
    model: bedrock(gateway.key, { fetch: counter.fetch })(PROFILE),
    system: 'You are terse.',
    prompt: ask(8),
    maxRetries: 0,
  });

  assert.equal(counter.requests.length, 1);
  assert.equal(new URL(counter.requests[0]).pathname, wirePath(PROFILE, 'converse'));
  assert.equal(counter.headers[0].authorization, `Bearer ${gateway.key}`);
  assert.equal(words(result.text), 8);
  assert.equal(result.finishReason, 'stop');
  assert.equal(result.usage.outputTokens, 8);
  const charged = converseCost(HAIKU, result.usage.raw);
  assert.ok(charged > 0);
  const budget = await spend.assertCharged(charged);
  assert.equal(Number(result.response.headers['x-tollgate-cost-usd-micros']), charged);
  assert.equal(
    Number(result.response.headers['x-tollgate-budget-remaining-usd-micros']),
    budget.key.remaining_usd_micros,
  );
  await assertLedger(ledger, HAIKU, 1, charged);
});

test('@ai-sdk/amazon-bedrock generateText prices cache reads apart', async () => {
  const spend = await meter(gateway);
  const context = Array(8).fill('Here is some shared context that a prompt cache would hold.').join(' ');
  const result = await generateText({
    model: bedrock()(PROFILE),
    prompt: ask(4, `${context} mock:cached=16`),
    maxRetries: 0,
  });

  assert.equal(result.usage.inputTokenDetails.cacheReadTokens, 16);
  assert.equal(result.usage.raw.cacheReadInputTokens, 16);
  await spend.assertCharged(converseCost(HAIKU, result.usage.raw));
});

test('@ai-sdk/amazon-bedrock streamText through a profile is charged as the model', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const counter = countingFetch();
  const result = streamText({
    model: bedrock(gateway.key, { fetch: counter.fetch })(PROFILE),
    prompt: ask(6),
    maxRetries: 0,
  });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  const usage = await result.usage;

  assert.equal(counter.requests.length, 1);
  assert.equal(new URL(counter.requests[0]).pathname, wirePath(PROFILE, 'converse-stream'));
  assert.equal(words(text), 6);
  assert.equal(await result.finishReason, 'stop');
  assert.equal(usage.outputTokens, 6);
  const charged = converseCost(HAIKU, usage.raw);
  assert.ok(charged > 0);
  await spend.assertCharged(charged);
  await assertLedger(ledger, HAIKU, 1, charged);
});

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  }),
  execute: async ({ city }) => ({ city, forecast: 'sunny', celsius: 21 }),
});

test('@ai-sdk/amazon-bedrock generateText runs a tool loop, each step charged', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const result = await generateText({
    model: bedrock()(PROFILE),
    prompt: 'What is the weather in Paris? mock:tokens=5',
    tools: { weather },
    stopWhen: stepCountIs(3),
    maxRetries: 0,
  });

  assert.equal(result.steps.length, 2);
  assert.equal(result.steps[0].finishReason, 'tool-calls');
  assert.equal(result.steps[0].toolCalls[0].toolName, 'weather');
  assert.equal(result.steps[0].toolResults[0].output.forecast, 'sunny');
  assert.equal(words(result.text), 5);
  const charged = result.steps.reduce((sum, step) => sum + converseCost(HAIKU, step.usage.raw), 0);
  await spend.assertCharged(charged);
  await assertLedger(ledger, HAIKU, 2, charged);
});

// === refusals ===

/** The failure a promise ends in (it must fail). */
const failure = (promise) =>
  promise.then(
    () => assert.fail('the call did not fail'),
    (error) => error,
  );

test('BedrockRuntimeClient on an unpriced model is a ResourceNotFoundException, uncharged', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const { client, counter } = runtime();
  const error = await failure(
    client.send(new ConverseCommand({ modelId: `us.${UNPRICED}`, messages: [user(ask(3))] })),
  );

  assert.ok(error instanceof ResourceNotFoundException, `not a ResourceNotFoundException: ${error}`);
  assert.equal(error.$metadata.httpStatusCode, 404);
  assert.match(error.message, new RegExp(UNPRICED.replaceAll('.', '\\.')));
  assert.equal(counter.paths.length, 1);
  await spend.assertCharged(0);
  assert.deepEqual(spendDelta(ledger, await spendByModel(gateway)), {});
});

test('BedrockRuntimeClient with a guardrail is a ValidationException, uncharged', async () => {
  const spend = await meter(gateway);
  const { client, counter } = runtime();
  const error = await failure(
    client.send(
      new ConverseCommand({
        modelId: PROFILE,
        messages: [user(ask(3))],
        guardrailConfig: { guardrailIdentifier: 'tollgate-test-guardrail', guardrailVersion: '1' },
      }),
    ),
  );

  assert.ok(error instanceof ValidationException, `not a ValidationException: ${error}`);
  assert.equal(error.$metadata.httpStatusCode, 400);
  assert.match(error.message, /guardrail/i);
  assert.equal(counter.paths.length, 1);
  await spend.assertCharged(0);
});

test('BedrockRuntimeClient with a wrong key is an UnrecognizedClientException', async () => {
  const spend = await meter(gateway);
  const { client, counter } = runtime('tg-not-a-configured-key');
  const error = await failure(client.send(new ConverseCommand({ modelId: PROFILE, messages: [user(ask(3))] })));

  assert.equal(error.name, 'UnrecognizedClientException');
  assert.equal(error.$metadata.httpStatusCode, 401);
  assert.equal(counter.paths.length, 1);
  await spend.assertCharged(0);
});

/** The tiny key's budget is what it was: nothing spent, nothing held. */
async function assertTinyUntouched(before) {
  const budget = await settledBudget({ url: gateway.url, key: gateway.tinyKey });
  assert.equal(budget.key.spent_usd_micros, before.key.spent_usd_micros);
  assert.equal(budget.key.reserved_usd_micros, 0);
}

for (const [name, command] of [
  ['ConverseCommand', () => new ConverseCommand({ modelId: PROFILE, messages: [user(ask(3))] })],
  ['ConverseStreamCommand', () => new ConverseStreamCommand({ modelId: PROFILE, messages: [user(ask(3))] })],
  ['InvokeModelCommand', () => new InvokeModelCommand({ modelId: HAIKU, body: invokeBody(3) })],
  [
    'InvokeModelWithResponseStreamCommand',
    () => new InvokeModelWithResponseStreamCommand({ modelId: PROFILE, body: invokeBody(3) }),
  ],
]) {
  test(`${name} on an exhausted budget is a 402 BudgetExceededException, not retried`, async () => {
    const before = await readBudget({ url: gateway.url, key: gateway.tinyKey });
    // The default retry strategy (standard, 3 attempts): it would resend a
    // throttling or 5xx answer.
    const { client, counter } = runtime(gateway.tinyKey);
    const error = await failure(client.send(command()));

    assert.equal(error.name, 'BudgetExceededException');
    assert.equal(error.$metadata.httpStatusCode, 402);
    assert.equal(error.$metadata.attempts, 1);
    assert.equal(error.$retryable, undefined, 'the SDK took the refusal for a retryable error');
    assert.match(error.message, new RegExp(gateway.tinyKeyId), 'the message names the scope that denied');
    assert.equal(error.$response.headers['x-should-retry'], 'false');
    assert.deepEqual(counter.paths.length, 1, `the SDK resent a budget denial: ${counter.paths}`);
    await assertTinyUntouched(before);
  });
}

/** A stream's failure, whether streamText threw it or reported it. */
async function streamFailure(options) {
  let reported;
  const result = streamText({ ...options, onError: ({ error }) => (reported = error) });
  try {
    for await (const _ of result.textStream);
  } catch (error) {
    return error;
  }
  assert.ok(reported, 'the stream did not fail');
  return reported;
}

const apiCallError = (error) => {
  const cause = APICallError.isInstance(error) ? error : error.lastError;
  assert.ok(APICallError.isInstance(cause), `not an API error: ${error}`);
  return cause;
};

for (const [name, call] of [
  ['generateText', (provider) => failure(generateText({ model: provider(PROFILE), prompt: ask(3) }))],
  ['streamText', (provider) => streamFailure({ model: provider(PROFILE), prompt: ask(3) })],
]) {
  test(`@ai-sdk/amazon-bedrock ${name} on an exhausted budget is a 402, not retried`, async () => {
    const before = await readBudget({ url: gateway.url, key: gateway.tinyKey });
    const counter = countingFetch();
    // The default maxRetries (2): the SDK would resend a retryable answer.
    const cause = apiCallError(await call(bedrock(gateway.tinyKey, { fetch: counter.fetch })));

    assert.equal(cause.statusCode, 402);
    assert.equal(cause.isRetryable, false);
    assert.equal(cause.responseHeaders['x-amzn-errortype'], 'BudgetExceededException');
    assert.match(JSON.parse(cause.responseBody).message, new RegExp(gateway.tinyKeyId));
    assert.equal(counter.requests.length, 1, `the SDK resent a budget denial: ${counter.requests}`);
    await assertTinyUntouched(before);
  });
}
