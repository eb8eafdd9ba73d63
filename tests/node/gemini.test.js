// The Vercel AI SDK's Gemini API provider (`@ai-sdk/google`) through the
// gateway, set up as an agent would (a base URL and the gateway key as its
// API key): generateText and streamText, alone and in a tool loop the SDK
// drives, each step charged exactly the price of the usageMetadata it
// reported; a budget denial is a 402 the SDK does not resend; a burst at a
// tight cap never spends past it.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { APICallError, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';

import {
  ask,
  cost,
  countingFetch,
  createKey,
  geminiCost,
  meter,
  readBudget,
  settledBudget,
  startGoogleGateway,
  usdString,
  words,
} from './harness.js';

const MODEL = 'gemini-2.5-flash';

let gateway;

before(async () => {
  gateway = await startGoogleGateway();
});

after(async () => {
  await gateway?.stop();
});

function google(apiKey = gateway.key, options = {}) {
  return createGoogleGenerativeAI({ baseURL: `${gateway.url}/v1beta`, apiKey, ...options });
}

/** The price of one step, from the usageMetadata the SDK keeps raw. */
const stepCost = (usage) => geminiCost(MODEL, usage.raw);

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
  }),
  execute: async ({ city }) => ({ city, forecast: 'sunny', celsius: 21 }),
});

test('generateText is charged its usage', async () => {
  const spend = await meter(gateway);
  const result = await generateText({ model: google()(MODEL), prompt: ask(8), maxOutputTokens: 256, maxRetries: 0 });

  assert.equal(words(result.text), 8);
  assert.equal(result.usage.raw.candidatesTokenCount, 8);
  const charged = stepCost(result.usage);
  assert.ok(charged > 0);
  const budget = await spend.assertCharged(charged);
  assert.equal(Number(result.response.headers['x-tollgate-cost-usd-micros']), charged);
  assert.equal(
    Number(result.response.headers['x-tollgate-budget-remaining-usd-micros']),
    budget.key.remaining_usd_micros,
  );
});

test('generateText without an output limit prices thoughts and cache reads by class', async () => {
  const spend = await meter(gateway);
  const context = 'Here is some shared context that a context cache would hold. '.repeat(4);
  const result = await generateText({
    model: google()(MODEL),
    prompt: ask(3, `${context} mock:cached=10 mock:thoughts=6`),
    maxRetries: 0,
  });

  const usage = result.usage.raw;
  assert.equal(usage.candidatesTokenCount, 3);
  assert.equal(usage.cachedContentTokenCount, 10);
  assert.equal(usage.thoughtsTokenCount, 6);
  await spend.assertCharged(stepCost(result.usage));
});

test('streamText is charged its last usage', async () => {
  const spend = await meter(gateway);
  const result = streamText({ model: google()(MODEL), prompt: ask(6), maxOutputTokens: 256, maxRetries: 0 });
  let text = '';
  for await (const delta of result.textStream) text += delta;
  const usage = await result.usage;

  assert.equal(words(text), 6);
  assert.equal(usage.raw.candidatesTokenCount, 6);
  assert.equal(await result.finishReason, 'stop');
  await spend.assertCharged(stepCost(usage));
});

test('generateText runs a tool loop, each step charged', async () => {
  const spend = await meter(gateway);
  const result = await generateText({
    model: google()(MODEL),
    prompt: 'What is the weather in Paris? mock:tokens=5',
    tools: { weather },
    stopWhen: stepCountIs(3),
    maxRetries: 0,
  });

  assert.equal(result.steps.length, 2);
  const [call] = result.steps[0].toolCalls;
  assert.equal(call.toolName, 'weather');
  assert.equal(result.steps[0].toolResults[0].output.forecast, 'sunny');
  assert.equal(words(result.text), 5);
  await spend.assertCharged(result.steps.reduce((sum, step) => sum + stepCost(step.usage), 0));
});

test('streamText runs a tool loop, each step charged', async () => {
  const spend = await meter(gateway);
  const result = streamText({
    model: google()(MODEL),
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
  await spend.assertCharged(steps.reduce((sum, step) => sum + stepCost(step.usage), 0));
});

/** The budget of the tiny key is what it was: nothing spent, nothing held. */
async function assertTinyUntouched(before) {
  const tiny = { url: gateway.url, key: gateway.tinyKey };
  const budget = await settledBudget(tiny);
  assert.equal(budget.key.spent_usd_micros, before.key.spent_usd_micros);
  assert.equal(budget.key.reserved_usd_micros, 0);
}

for (const [name, call] of [
  ['generateText', (model) => generateText({ model, prompt: ask(3) })],
  [
    'streamText',
    async (model) => {
      let failure;
      const result = streamText({ model, prompt: ask(3), onError: ({ error }) => (failure = error) });
      for await (const _ of result.textStream);
      if (failure) throw failure;
    },
  ],
]) {
  test(`${name} on an exhausted budget is a 402, not retried`, async () => {
    const before = await readBudget({ url: gateway.url, key: gateway.tinyKey });
    const counter = countingFetch();
    // The default maxRetries (2): the SDK would resend a retryable answer.
    const model = google(gateway.tinyKey, { fetch: counter.fetch })(MODEL);

    const error = await call(model).then(
      () => assert.fail('the call was not denied'),
      (failure) => failure,
    );
    const cause = APICallError.isInstance(error) ? error : error.lastError;
    assert.ok(APICallError.isInstance(cause), `not an API error: ${error}`);
    assert.equal(cause.statusCode, 402);
    assert.equal(cause.isRetryable, false);
    assert.match(cause.message, /node-google-tiny-key/, 'the message names the scope that denied');
    assert.equal(JSON.parse(cause.responseBody).error.code, 402, "Google's error shape");
    assert.equal(counter.requests.length, 1, `the SDK resent a budget denial: ${counter.requests}`);
    await assertTinyUntouched(before);
  });
}

test('a burst at a tight cap never overspends', async () => {
  const calls = 10;
  const outputTokens = 400;
  // Room for three calls' reservations, not four: each is reserved its
  // whole output allowance (thinking off) and spends it.
  const cap = Math.floor(cost(MODEL, { output: outputTokens }) * 3.5);
  const secret = await createKey(gateway, { cap_usd: usdString(cap), period: 'total' });
  const counter = countingFetch();
  const model = google(secret, { fetch: counter.fetch })(MODEL);

  const outcomes = await Promise.allSettled(
    Array.from({ length: calls }, (_, index) =>
      generateText({
        model,
        prompt: ask(outputTokens, `call ${index}`),
        maxOutputTokens: outputTokens,
        providerOptions: { google: { thinkingConfig: { thinkingBudget: 0 } } },
      }),
    ),
  );

  const served = outcomes.filter((outcome) => outcome.status === 'fulfilled').map((outcome) => outcome.value);
  const refused = outcomes.filter((outcome) => outcome.status === 'rejected').map((outcome) => outcome.reason);
  for (const reason of refused) {
    assert.ok(APICallError.isInstance(reason) && reason.statusCode === 402, `not a budget denial: ${reason}`);
  }
  assert.ok(served.length > 0, 'no call fitted the cap');
  assert.ok(refused.length > 0, 'every call fitted: the cap was not tight');
  assert.equal(counter.requests.length, calls, 'a denial was resent');
  const budget = await settledBudget({ url: gateway.url, key: secret });
  assert.equal(budget.key.reserved_usd_micros, 0);
  assert.ok(budget.key.spent_usd_micros <= cap, `spent ${budget.key.spent_usd_micros} µUSD of a ${cap} µUSD cap`);
  assert.equal(
    budget.key.spent_usd_micros,
    served.reduce((sum, result) => sum + stepCost(result.usage), 0),
  );
});
