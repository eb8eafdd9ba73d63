// The official OpenAI Node SDK through the gateway: chat completions and
// the Responses API, whole and streamed, each charged exactly the price of
// the usage the SDK reports.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import OpenAI from 'openai';

import { ask, chatCost, meter, responsesCost, startGateway, words } from './harness.js';

const MODEL = 'gpt-4o-mini';

let gateway;
let client;

before(async () => {
  gateway = await startGateway();
  client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
});

after(async () => {
  await gateway?.stop();
});

test('a chat completion is charged its usage', async () => {
  const spend = await meter(gateway);
  const { data: completion, response } = await client.chat.completions
    .create({ model: MODEL, messages: [{ role: 'user', content: ask(9) }] })
    .withResponse();

  assert.equal(completion.usage.completion_tokens, 9);
  assert.equal(words(completion.choices[0].message.content), 9);
  const expected = chatCost(MODEL, completion.usage);
  assert.ok(expected > 0);
  const budget = await spend.assertCharged(expected);
  assert.equal(Number(response.headers.get('x-tollgate-cost-usd-micros')), expected);
  assert.equal(Number(response.headers.get('x-tollgate-budget-remaining-usd-micros')), budget.key.remaining_usd_micros);
});

test('a chat stream delivers the usage chunk it asked for and is charged it', async () => {
  const spend = await meter(gateway);
  const stream = await client.chat.completions.create({
    model: MODEL,
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
  await spend.assertCharged(chatCost(MODEL, last.usage));
});

test('a chat stream without usage hides the chunk the gateway asked for', async () => {
  const messages = [{ role: 'user', content: ask(5) }];
  // The same prompt unstreamed tells how many input tokens the mock counts.
  const twin = await client.chat.completions.create({ model: MODEL, messages });
  const spend = await meter(gateway);
  const stream = await client.chat.completions.create({ model: MODEL, messages, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);

  assert.ok(chunks.every((chunk) => !chunk.usage && chunk.choices.length > 0), 'a usage chunk leaked');
  const text = chunks.map((chunk) => chunk.choices[0].delta.content ?? '').join('');
  assert.equal(words(text), 5);
  await spend.assertCharged(chatCost(MODEL, { ...twin.usage, completion_tokens: words(text) }));
});

test('a response is charged its usage', async () => {
  const spend = await meter(gateway);
  const response = await client.responses.create({ model: MODEL, input: ask(8) });

  assert.equal(response.status, 'completed');
  assert.equal(response.usage.output_tokens, 8);
  assert.equal(words(response.output_text), 8);
  await spend.assertCharged(responsesCost(MODEL, response.usage));
});

test('a response stream ends with its usage in response.completed', async () => {
  const spend = await meter(gateway);
  const stream = await client.responses.create({
    model: MODEL,
    input: [{ role: 'user', content: ask(7) }],
    stream: true,
  });
  const events = [];
  for await (const event of stream) events.push(event);

  assert.equal(events[0].type, 'response.created');
  const completed = events.at(-1);
  assert.equal(completed.type, 'response.completed');
  const text = events
    .filter((event) => event.type === 'response.output_text.delta')
    .map((event) => event.delta)
    .join('');
  assert.equal(words(text), 7);
  assert.equal(completed.response.usage.output_tokens, 7);
  await spend.assertCharged(responsesCost(MODEL, completed.response.usage));
});

test('the Responses stream helper gives the final response', async () => {
  const spend = await meter(gateway);
  const stream = client.responses.stream({ model: MODEL, input: ask(4) });
  const deltas = [];
  stream.on('response.output_text.delta', (event) => deltas.push(event.delta));
  const final = await stream.finalResponse();

  const text = final.output
    .filter((item) => item.type === 'message')
    .flatMap((item) => item.content)
    .map((part) => part.text)
    .join('');
  assert.equal(text, deltas.join(''));
  assert.equal(words(text), 4);
  assert.equal(final.usage.output_tokens, 4);
  await spend.assertCharged(responsesCost(MODEL, final.usage));
});
