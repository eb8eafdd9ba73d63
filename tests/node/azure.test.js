// Azure OpenAI through the gateway with the Vercel AI SDK's Azure provider
// (`@ai-sdk/azure`) and the official OpenAI SDK's `AzureOpenAI`, set up as
// an agent would (the gateway as the endpoint, the gateway key as the Azure
// key): every call on a deployment is charged exactly the price of the
// usage the SDK reports at the prices of the model the provider maps the
// deployment to, and the ledger records it as that model; an unmapped
// deployment is a 404 and a budget denial a 402, neither charged nor
// resent.
//
// The gateway's azure provider maps `prod-4o` to `gpt-4o` and `mini` to
// `gpt-4o-mini`; the mock, playing Azure, answers as the dated models
// (`AZURE_DEPLOYMENTS` in harness.js).
//
// URLs `@ai-sdk/azure` 3.0.128 builds: with a `baseURL` whose host is not
// an Azure one (`*.openai.azure.com`, …), `{baseURL}{path}` with no
// `api-version`, so `createAzure({ baseURL: gateway + '/openai/v1' })` calls
// the v1 API's `/openai/v1/responses`, `/chat/completions` and
// `/embeddings` with the deployment as the body's `model`; with
// `useDeploymentBasedUrls`, `{baseURL}/deployments/{id}{path}?api-version=`
// its `apiVersion`. Either way the key goes in `api-key`.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createAzure } from '@ai-sdk/azure';
import { APICallError, embed, embedMany, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI, { AzureOpenAI } from 'openai';

import {
  AZURE_DEPLOYMENTS,
  ask,
  chatCost,
  cost,
  countingFetch,
  meter,
  readBudget,
  settledBudget,
  spendByModel,
  spendDelta,
  startGateway,
  words,
} from './harness.js';

const GA_API_VERSION = '2024-10-21';
const RESPONSES_API_VERSION = '2025-04-01-preview';

let gateway;

before(async () => {
  gateway = await startGateway();
});

after(async () => {
  await gateway?.stop();
});

const priced = (deployment) => AZURE_DEPLOYMENTS[deployment].priced;
const served = (deployment) => AZURE_DEPLOYMENTS[deployment].served;

/** `@ai-sdk/azure` on the gateway's v1 API. */
function azure(apiKey = gateway.key, options = {}) {
  return createAzure({ baseURL: `${gateway.url}/openai/v1`, apiKey, ...options });
}

/** The official SDK's Azure client, the gateway as the resource endpoint. */
function azureOpenAI(apiKey = gateway.key, options = {}) {
  return new AzureOpenAI({ endpoint: gateway.url, apiKey, apiVersion: GA_API_VERSION, ...options });
}

/** The price of one AI SDK step's usage, at `model`'s prices. */
function stepCost(model, usage) {
  const cached = usage.inputTokenDetails?.cacheReadTokens ?? usage.cachedInputTokens ?? 0;
  return cost(model, { input: usage.inputTokens - cached, cachedInput: cached, output: usage.outputTokens });
}

/** The one request an SDK sent: to `path` (query aside), with the given
 * `api-version` (or none), the key in `api-key` and no bearer token. */
function assertSent(counter, path, apiVersion) {
  assert.equal(counter.requests.length, 1, `${counter.requests}`);
  const url = new URL(counter.requests[0]);
  assert.equal(url.pathname, path);
  assert.equal(url.searchParams.get('api-version'), apiVersion);
  assert.match(counter.headers[0]['api-key'] ?? '', /^tg-node-/, 'the key goes in api-key');
  assert.equal(counter.headers[0].authorization, undefined);
}

/** The ledger billed `model` alone since the `before` report (from
 * `spendByModel`): `calls` calls for `expected` µUSD. */
async function assertLedger(before, model, calls, expected) {
  assert.deepEqual(spendDelta(before, await spendByModel(gateway)), { [model]: { calls, cost: expected } });
}

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

// === @ai-sdk/azure ===

for (const [api, deployment, model, path] of [
  ['Responses', 'mini', (provider) => provider('mini'), '/openai/v1/responses'],
  ['chat', 'prod-4o', (provider) => provider.chat('prod-4o'), '/openai/v1/chat/completions'],
]) {
  test(`@ai-sdk/azure generateText on ${api} is charged as the mapped model`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const counter = countingFetch();
    const result = await generateText({
      model: model(azure(gateway.key, { fetch: counter.fetch })),
      prompt: ask(8),
      maxRetries: 0,
    });

    assertSent(counter, path, null);
    assert.equal(words(result.text), 8);
    assert.equal(result.usage.outputTokens, 8);
    assert.equal(result.response.modelId, served(deployment), 'the answer names the model the deployment runs');
    const charged = stepCost(priced(deployment), result.usage);
    assert.ok(charged > 0);
    const budget = await spend.assertCharged(charged);
    assert.equal(Number(result.response.headers['x-tollgate-cost-usd-micros']), charged);
    assert.equal(
      Number(result.response.headers['x-tollgate-budget-remaining-usd-micros']),
      budget.key.remaining_usd_micros,
    );
    await assertLedger(ledger, priced(deployment), 1, charged);
  });

  test(`@ai-sdk/azure streamText on ${api} is charged as the mapped model`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const result = streamText({ model: model(azure()), prompt: ask(6), maxRetries: 0 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    const usage = await result.usage;

    assert.equal(words(text), 6);
    assert.equal(usage.outputTokens, 6);
    assert.equal(await result.finishReason, 'stop');
    const charged = stepCost(priced(deployment), usage);
    await spend.assertCharged(charged);
    await assertLedger(ledger, priced(deployment), 1, charged);
  });

  test(`@ai-sdk/azure generateText runs a tool loop on ${api}, each step charged`, async () => {
    const spend = await meter(gateway);
    const result = await generateText({
      model: model(azure()),
      prompt: 'What is the weather in Paris? mock:tokens=5',
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });

    assert.equal(result.steps.length, 2);
    assert.equal(result.steps[0].toolCalls[0].toolName, 'weather');
    assert.equal(result.steps[0].toolResults[0].output.forecast, 'sunny');
    assert.equal(words(result.text), 5);
    await spend.assertCharged(result.steps.reduce((sum, step) => sum + stepCost(priced(deployment), step.usage), 0));
  });
}

test('@ai-sdk/azure streamText runs a tool loop on chat, each step charged', async () => {
  const spend = await meter(gateway);
  const result = streamText({
    model: azure().chat('mini'),
    prompt: 'What is the weather in Paris? mock:tokens=4',
    tools: { weather },
    stopWhen: stepCountIs(3),
    maxRetries: 0,
  });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  const steps = await result.steps;

  assert.equal(steps.length, 2);
  assert.equal(steps[0].toolCalls[0].toolName, 'weather');
  assert.equal(words(text), 4);
  await spend.assertCharged(steps.reduce((sum, step) => sum + stepCost('gpt-4o-mini', step.usage), 0));
});

test('@ai-sdk/azure embed is charged as the mapped model', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const counter = countingFetch();
  const result = await embed({
    model: azure(gateway.key, { fetch: counter.fetch }).embedding('mini'),
    value: 'the first text to embed',
    maxRetries: 0,
  });

  assertSent(counter, '/openai/v1/embeddings', null);
  assert.ok(result.embedding.length > 0);
  assert.ok(result.usage.tokens > 0);
  const charged = cost('gpt-4o-mini', { input: result.usage.tokens });
  assert.ok(charged > 0);
  await spend.assertCharged(charged);
  await assertLedger(ledger, 'gpt-4o-mini', 1, charged);
});

test('@ai-sdk/azure embedMany is one call, charged as the mapped model', async () => {
  const spend = await meter(gateway);
  const counter = countingFetch();
  const result = await embedMany({
    model: azure(gateway.key, { fetch: counter.fetch }).embedding('prod-4o'),
    values: ['the first text to embed', 'and a second, somewhat longer, text to embed'],
    maxRetries: 0,
  });

  assert.equal(counter.requests.length, 1);
  assert.equal(result.embeddings.length, 2);
  await spend.assertCharged(cost('gpt-4o', { input: result.usage.tokens }));
});

for (const [api, apiVersion, model, path] of [
  ['chat', GA_API_VERSION, (provider) => provider.chat('prod-4o'), '/openai/deployments/prod-4o/chat/completions'],
  ['Responses', RESPONSES_API_VERSION, (provider) => provider('prod-4o'), '/openai/deployments/prod-4o/responses'],
]) {
  test(`@ai-sdk/azure with deployment-based URLs on ${api} is charged as the mapped model`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const counter = countingFetch();
    const provider = createAzure({
      baseURL: `${gateway.url}/openai`,
      apiKey: gateway.key,
      apiVersion,
      useDeploymentBasedUrls: true,
      fetch: counter.fetch,
    });
    const result = streamText({ model: model(provider), prompt: ask(5), maxRetries: 0 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    const usage = await result.usage;

    assertSent(counter, path, apiVersion);
    assert.equal(words(text), 5);
    const charged = stepCost('gpt-4o', usage);
    await spend.assertCharged(charged);
    await assertLedger(ledger, 'gpt-4o', 1, charged);
  });
}

// === the OpenAI SDK's AzureOpenAI ===

test('AzureOpenAI chat completion is charged as the mapped model', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const counter = countingFetch();
  const client = azureOpenAI(gateway.key, { fetch: counter.fetch, maxRetries: 0 });
  const { data: completion, response } = await client.chat.completions
    .create({ model: 'prod-4o', messages: [{ role: 'user', content: ask(9) }] })
    .withResponse();

  assertSent(counter, '/openai/deployments/prod-4o/chat/completions', GA_API_VERSION);
  assert.equal(completion.model, served('prod-4o'));
  assert.equal(completion.usage.completion_tokens, 9);
  assert.equal(words(completion.choices[0].message.content), 9);
  assert.equal(completion.prompt_filter_results[0].content_filter_results.hate.filtered, false);
  const expected = chatCost('gpt-4o', completion.usage);
  const budget = await spend.assertCharged(expected);
  assert.equal(Number(response.headers.get('x-tollgate-cost-usd-micros')), expected);
  assert.equal(Number(response.headers.get('x-tollgate-budget-remaining-usd-micros')), budget.key.remaining_usd_micros);
  await assertLedger(ledger, 'gpt-4o', 1, expected);
});

test('AzureOpenAI chat stream delivers the usage chunk it asked for and is charged it', async () => {
  const ledger = await spendByModel(gateway);
  const spend = await meter(gateway);
  const stream = await azureOpenAI().chat.completions.create({
    model: 'mini',
    messages: [{ role: 'user', content: ask(6) }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);

  const withUsage = chunks.filter((chunk) => chunk.usage);
  assert.equal(withUsage.length, 1);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  const text = chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('');
  assert.equal(words(text), 6);
  assert.equal(last.usage.completion_tokens, 6);
  const expected = chatCost('gpt-4o-mini', last.usage);
  await spend.assertCharged(expected);
  await assertLedger(ledger, 'gpt-4o-mini', 1, expected);
});

test('AzureOpenAI chat stream without usage hides the chunk the gateway asked for', async () => {
  const client = azureOpenAI();
  const messages = [{ role: 'user', content: ask(5) }];
  // The same prompt unstreamed tells how many input tokens the mock counts.
  const twin = await client.chat.completions.create({ model: 'mini', messages });
  const spend = await meter(gateway);
  const stream = await client.chat.completions.create({ model: 'mini', messages, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);

  assert.ok(chunks.every((chunk) => !chunk.usage), 'a usage chunk leaked');
  // Azure opens its streams with the prompt's annotations and no choice.
  const [first, ...rest] = chunks;
  assert.deepEqual(first.choices, []);
  assert.ok(first.prompt_filter_results, "not Azure's opening chunk");
  assert.ok(rest.length > 0 && rest.every((chunk) => chunk.choices.length > 0), 'another chunk without choices');
  const text = rest.map((chunk) => chunk.choices[0].delta.content ?? '').join('');
  assert.equal(words(text), 5);
  await spend.assertCharged(chatCost('gpt-4o-mini', { ...twin.usage, completion_tokens: words(text) }));
});

test('AzureOpenAI with a fixed deployment routes by the URL, not the body', async () => {
  const spend = await meter(gateway);
  const counter = countingFetch();
  const client = azureOpenAI(gateway.key, { deployment: 'prod-4o', fetch: counter.fetch });
  const completion = await client.chat.completions.create({
    model: 'mini',
    messages: [{ role: 'user', content: ask(4) }],
  });

  assertSent(counter, '/openai/deployments/prod-4o/chat/completions', GA_API_VERSION);
  assert.equal(completion.model, served('prod-4o'));
  await spend.assertCharged(chatCost('gpt-4o', completion.usage));
});

test('AzureOpenAI Responses on the dated API is charged as the mapped model', async () => {
  const spend = await meter(gateway);
  const counter = countingFetch();
  const client = azureOpenAI(gateway.key, { apiVersion: RESPONSES_API_VERSION, fetch: counter.fetch });
  const response = await client.responses.create({ model: 'mini', input: ask(7) });

  assertSent(counter, '/openai/responses', RESPONSES_API_VERSION);
  assert.equal(response.usage.output_tokens, 7);
  const cached = response.usage.input_tokens_details?.cached_tokens ?? 0;
  await spend.assertCharged(
    cost('gpt-4o-mini', { input: response.usage.input_tokens - cached, cachedInput: cached, output: 7 }),
  );
});

test('the plain OpenAI client on the v1 API sends a bearer key and is charged', async () => {
  const spend = await meter(gateway);
  const counter = countingFetch();
  const client = new OpenAI({ baseURL: `${gateway.url}/openai/v1`, apiKey: gateway.key, fetch: counter.fetch });
  const completion = await client.chat.completions.create({
    model: 'mini',
    messages: [{ role: 'user', content: ask(3) }],
  });

  assert.equal(new URL(counter.requests[0]).pathname, '/openai/v1/chat/completions');
  assert.match(counter.headers[0].authorization, /^Bearer tg-node-/);
  assert.equal(completion.model, served('mini'));
  await spend.assertCharged(chatCost('gpt-4o-mini', completion.usage));
});

// === errors ===

/** The failure a promise ends in (it must fail). */
const failure = (promise) =>
  promise.then(
    () => assert.fail('the call did not fail'),
    (error) => error,
  );

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
  ['generateText on Responses', (provider) => failure(generateText({ model: provider('no-such-deployment'), prompt: ask(3) }))],
  ['streamText on chat', (provider) => streamFailure({ model: provider.chat('no-such-deployment'), prompt: ask(3) })],
  ['embed', (provider) => failure(embed({ model: provider.embedding('no-such-deployment'), value: 'text' }))],
]) {
  test(`@ai-sdk/azure ${name} on an unmapped deployment is a 404, uncharged`, async () => {
    const ledger = await spendByModel(gateway);
    const spend = await meter(gateway);
    const counter = countingFetch();
    const cause = apiCallError(await call(azure(gateway.key, { fetch: counter.fetch })));

    assert.equal(cause.statusCode, 404);
    const error = JSON.parse(cause.responseBody).error;
    assert.equal(error.code, 'DeploymentNotFound');
    assert.match(error.message, /no-such-deployment/);
    assert.equal(counter.requests.length, 1);
    await spend.assertCharged(0);
    assert.deepEqual(spendDelta(ledger, await spendByModel(gateway)), {});
  });
}

test('AzureOpenAI on an unmapped deployment is a NotFoundError, uncharged', async () => {
  const spend = await meter(gateway);
  const counter = countingFetch();
  const error = await failure(
    azureOpenAI(gateway.key, { fetch: counter.fetch }).chat.completions.create({
      model: 'no-such-deployment',
      messages: [{ role: 'user', content: ask(3) }],
    }),
  );

  assert.ok(error instanceof OpenAI.NotFoundError, `not a NotFoundError: ${error}`);
  assert.equal(error.status, 404);
  assert.equal(error.code, 'DeploymentNotFound');
  assert.equal(counter.requests.length, 1);
  await spend.assertCharged(0);
});

/** The tiny key's budget is what it was: nothing spent, nothing held. */
async function assertTinyUntouched(before) {
  const budget = await settledBudget({ url: gateway.url, key: gateway.tinyKey });
  assert.equal(budget.key.spent_usd_micros, before.key.spent_usd_micros);
  assert.equal(budget.key.reserved_usd_micros, 0);
}

for (const [name, call] of [
  ['generateText on Responses', (provider) => failure(generateText({ model: provider('mini'), prompt: ask(3) }))],
  ['streamText on Responses', (provider) => streamFailure({ model: provider('mini'), prompt: ask(3) })],
  ['generateText on chat', (provider) => failure(generateText({ model: provider.chat('prod-4o'), prompt: ask(3) }))],
  ['streamText on chat', (provider) => streamFailure({ model: provider.chat('prod-4o'), prompt: ask(3) })],
]) {
  test(`@ai-sdk/azure ${name} on an exhausted budget is a 402, not retried`, async () => {
    const before = await readBudget({ url: gateway.url, key: gateway.tinyKey });
    const counter = countingFetch();
    // The default maxRetries (2): the SDK would resend a retryable answer.
    const cause = apiCallError(await call(azure(gateway.tinyKey, { fetch: counter.fetch })));

    assert.equal(cause.statusCode, 402);
    assert.equal(cause.isRetryable, false);
    const error = JSON.parse(cause.responseBody).error;
    assert.equal(error.code, 'budget_exceeded');
    assert.match(error.message, new RegExp(gateway.tinyKeyId), 'the message names the scope that denied');
    assert.equal(counter.requests.length, 1, `the SDK resent a budget denial: ${counter.requests}`);
    await assertTinyUntouched(before);
  });
}

for (const stream of [false, true]) {
  test(`AzureOpenAI chat${stream ? ' stream' : ''} on an exhausted budget is a 402, not retried`, async () => {
    const before = await readBudget({ url: gateway.url, key: gateway.tinyKey });
    const counter = countingFetch();
    // The default maxRetries (2): the SDK would resend a 429 or a 5xx.
    const client = azureOpenAI(gateway.tinyKey, { fetch: counter.fetch });
    const error = await failure(
      client.chat.completions.create({ model: 'mini', messages: [{ role: 'user', content: ask(3) }], stream }),
    );

    assert.ok(error instanceof OpenAI.APIError, `not an API error: ${error}`);
    assert.equal(error.status, 402);
    assert.equal(error.code, 'budget_exceeded');
    assert.equal(error.headers.get('x-should-retry'), 'false');
    assert.equal(counter.requests.length, 1, `the SDK resent a budget denial: ${counter.requests}`);
    await assertTinyUntouched(before);
  });
}
