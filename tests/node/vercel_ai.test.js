// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) through the gateway:
// generateText and streamText on chat completions and the Responses API,
// alone and in a tool loop the SDK drives itself. Every step is one call,
// charged exactly the price of the usage the SDK reports for it.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';

import { ask, cost, meter, startGateway, words } from './harness.js';

const MODEL = 'gpt-4o-mini';

let gateway;
let provider;

before(async () => {
  gateway = await startGateway();
  provider = createOpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key });
});

after(async () => {
  await gateway?.stop();
});

/** The price of one step's usage as the AI SDK reports it. */
function stepCost(usage) {
  const cached = usage.inputTokenDetails?.cacheReadTokens ?? usage.cachedInputTokens ?? 0;
  return cost(MODEL, { input: usage.inputTokens - cached, cachedInput: cached, output: usage.outputTokens });
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

for (const [api, model] of [
  ['chat', () => provider.chat(MODEL)],
  ['responses', () => provider.responses(MODEL)],
]) {
  test(`generateText on ${api} is charged its usage`, async () => {
    const spend = await meter(gateway);
    const result = await generateText({ model: model(), prompt: ask(8), maxRetries: 0 });

    assert.equal(words(result.text), 8);
    assert.equal(result.usage.outputTokens, 8);
    await spend.assertCharged(stepCost(result.usage));
  });

  test(`streamText on ${api} is charged its usage`, async () => {
    const spend = await meter(gateway);
    const result = streamText({ model: model(), prompt: ask(6), maxRetries: 0 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    const usage = await result.usage;

    assert.equal(words(text), 6);
    assert.equal(usage.outputTokens, 6);
    await spend.assertCharged(stepCost(usage));
  });

  test(`generateText runs a tool loop on ${api}`, async () => {
    const spend = await meter(gateway);
    const result = await generateText({
      model: model(),
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
    const expected = result.steps.reduce((sum, step) => sum + stepCost(step.usage), 0);
    await spend.assertCharged(expected);
  });

  test(`streamText runs a tool loop on ${api}`, async () => {
    const spend = await meter(gateway);
    const result = streamText({
      model: model(),
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
    const expected = steps.reduce((sum, step) => sum + stepCost(step.usage), 0);
    await spend.assertCharged(expected);
  });
}
