// The Vercel AI SDK's Vertex AI providers through the gateway:
// `@ai-sdk/google-vertex` (Gemini under publishers/google) and its
// `/anthropic` entry (Claude under publishers/anthropic, rawPredict and
// streamRawPredict). Their credential is the gateway key, handed to them as
// an OAuth2 client that already holds it as its access token, so no Google
// sign-in happens; the gateway swaps it for its service account's token and
// the client's project and location for its own. Every step is charged
// exactly the price of the usage it reported; a denial is a 402 neither
// resends; a burst at a tight cap never spends past it.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createVertex } from '@ai-sdk/google-vertex';
import { createVertexAnthropic } from '@ai-sdk/google-vertex/anthropic';
import { APICallError, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { OAuth2Client } from 'google-auth-library';

import {
  CLIENT_LOCATION,
  CLIENT_PROJECT,
  ask,
  cost,
  countingFetch,
  createKey,
  geminiCost,
  messagesCost,
  meter,
  readBudget,
  settledBudget,
  startGoogleGateway,
  usdString,
  words,
} from './harness.js';

const GEMINI_MODEL = 'gemini-2.5-flash';
// Claude as Vertex names it: the snapshot after an `@`.
const CLAUDE_MODEL = 'claude-haiku-4-5@20251001';
const TOKEN_LIFETIME_MS = 3_600_000;

let gateway;

before(async () => {
  gateway = await startGoogleGateway();
});

after(async () => {
  await gateway?.stop();
});

/** google-auth-library's OAuth2 client holding `key` as a fresh access
 * token: what the SDK asks for its bearer, never refreshed. */
function bearer(key) {
  const authClient = new OAuth2Client();
  authClient.setCredentials({ access_token: key, expiry_date: Date.now() + TOKEN_LIFETIME_MS });
  return { authClient };
}

// A base URL replaces the SDKs' whole default endpoint, project and
// location included, so it names the client's own (which the gateway
// replaces).
const vertexPath = (version, publisher) =>
  `${gateway.url}/${version}/projects/${CLIENT_PROJECT}/locations/${CLIENT_LOCATION}/publishers/${publisher}`;

const FAMILIES = {
  gemini: {
    model: GEMINI_MODEL,
    provider: (key = gateway.key, options = {}) =>
      createVertex({
        project: CLIENT_PROJECT,
        location: CLIENT_LOCATION,
        baseURL: vertexPath('v1beta1', 'google'),
        googleAuthOptions: bearer(key),
        ...options,
      }),
    stepCost: (usage) => geminiCost(GEMINI_MODEL, usage.raw),
    outputOf: (usage) => usage.raw.candidatesTokenCount,
    thinkingOff: { google: { thinkingConfig: { thinkingBudget: 0 } } },
    errorMessage: (body) => body.error.message,
  },
  claude: {
    model: CLAUDE_MODEL,
    provider: (key = gateway.key, options = {}) =>
      createVertexAnthropic({
        project: CLIENT_PROJECT,
        location: CLIENT_LOCATION,
        baseURL: `${vertexPath('v1', 'anthropic')}/models`,
        googleAuthOptions: bearer(key),
        ...options,
      }),
    stepCost: (usage) => messagesCost(CLAUDE_MODEL, usage.raw),
    outputOf: (usage) => usage.raw.output_tokens,
    thinkingOff: {},
    // Claude's routes answer in Anthropic's shape, which this SDK reads.
    errorMessage: (body) => {
      assert.equal(body.type, 'error');
      return body.error.message;
    },
  },
};

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
  }),
  execute: async ({ city }) => ({ city, forecast: 'sunny', celsius: 21 }),
});

for (const [family, { model, provider, stepCost, outputOf, thinkingOff, errorMessage }] of Object.entries(FAMILIES)) {
  test(`${family}: generateText is charged its usage`, async () => {
    const spend = await meter(gateway);
    const result = await generateText({
      model: provider()(model),
      prompt: ask(8),
      maxOutputTokens: 256,
      maxRetries: 0,
    });

    assert.equal(words(result.text), 8);
    assert.equal(outputOf(result.usage), 8);
    const charged = stepCost(result.usage);
    assert.ok(charged > 0);
    const budget = await spend.assertCharged(charged);
    assert.equal(Number(result.response.headers['x-tollgate-cost-usd-micros']), charged);
    assert.equal(
      Number(result.response.headers['x-tollgate-budget-remaining-usd-micros']),
      budget.key.remaining_usd_micros,
    );
  });

  test(`${family}: streamText without an output limit is charged its usage`, async () => {
    // The Claude provider fills max_tokens with the model's maximum; the
    // Gemini one leaves the limit to the gateway.
    const spend = await meter(gateway);
    const result = streamText({ model: provider()(model), prompt: ask(6), maxRetries: 0 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    const usage = await result.usage;

    assert.equal(words(text), 6);
    assert.equal(outputOf(usage), 6);
    assert.equal(await result.finishReason, 'stop');
    await spend.assertCharged(stepCost(usage));
  });

  test(`${family}: generateText runs a tool loop, each step charged`, async () => {
    const spend = await meter(gateway);
    const result = await generateText({
      model: provider()(model),
      prompt: 'What is the weather in Paris? mock:tokens=5',
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxOutputTokens: 256,
      maxRetries: 0,
    });

    assert.equal(result.steps.length, 2);
    assert.equal(result.steps[0].toolCalls[0].toolName, 'weather');
    assert.equal(result.steps[0].toolResults[0].output.forecast, 'sunny');
    assert.equal(words(result.text), 5);
    await spend.assertCharged(result.steps.reduce((sum, step) => sum + stepCost(step.usage), 0));
  });

  test(`${family}: streamText runs a tool loop, each step charged`, async () => {
    const spend = await meter(gateway);
    const result = streamText({
      model: provider()(model),
      prompt: 'What is the weather in Paris? mock:tokens=4',
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxOutputTokens: 256,
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

  for (const [name, call] of [
    ['generateText', (languageModel) => generateText({ model: languageModel, prompt: ask(3), maxOutputTokens: 64 })],
    [
      'streamText',
      async (languageModel) => {
        let failure;
        const result = streamText({
          model: languageModel,
          prompt: ask(3),
          maxOutputTokens: 64,
          onError: ({ error }) => (failure = error),
        });
        for await (const _ of result.textStream);
        if (failure) throw failure;
      },
    ],
  ]) {
    test(`${family}: ${name} on an exhausted budget is a 402, not retried`, async () => {
      const tiny = { url: gateway.url, key: gateway.tinyKey };
      const before = await readBudget(tiny);
      const counter = countingFetch();
      // The default maxRetries (2): the SDK would resend a retryable answer.
      const languageModel = provider(gateway.tinyKey, { fetch: counter.fetch })(model);

      const error = await call(languageModel).then(
        () => assert.fail('the call was not denied'),
        (failure) => failure,
      );
      const cause = APICallError.isInstance(error) ? error : error.lastError;
      assert.ok(APICallError.isInstance(cause), `not an API error: ${error}`);
      assert.equal(cause.statusCode, 402);
      assert.equal(cause.isRetryable, false);
      assert.match(errorMessage(JSON.parse(cause.responseBody)), /node-google-tiny-key/);
      assert.match(cause.message, /node-google-tiny-key/, 'the SDK shows the message that names the scope');
      assert.equal(counter.requests.length, 1, `the SDK resent a budget denial: ${counter.requests}`);
      const budget = await settledBudget(tiny);
      assert.equal(budget.key.spent_usd_micros, before.key.spent_usd_micros);
      assert.equal(budget.key.reserved_usd_micros, 0);
    });
  }

  test(`${family}: a burst at a tight cap never overspends`, async () => {
    const calls = 10;
    const outputTokens = 200;
    // Room for three calls' reservations, not four: each is reserved its
    // whole output allowance and spends it.
    const cap = Math.floor(cost(model, { output: outputTokens }) * 3.5);
    const secret = await createKey(gateway, { cap_usd: usdString(cap), period: 'total' });
    const counter = countingFetch();
    const languageModel = provider(secret, { fetch: counter.fetch })(model);

    const outcomes = await Promise.allSettled(
      Array.from({ length: calls }, (_, index) =>
        generateText({
          model: languageModel,
          prompt: ask(outputTokens, `call ${index}`),
          maxOutputTokens: outputTokens,
          providerOptions: thinkingOff,
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
}
