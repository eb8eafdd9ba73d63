// The official Anthropic Node SDK through the gateway: messages whole and
// streamed, each charged exactly the price of its final usage.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import { ask, meter, messagesCost, startGateway, words } from './harness.js';

const MODEL = 'claude-haiku-4-5';
const MAX_TOKENS = 256;
const USAGE_FIELDS = ['input_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens', 'output_tokens'];

let gateway;
let client;

before(async () => {
  gateway = await startGateway();
  client = new Anthropic({ baseURL: gateway.url, apiKey: gateway.key, maxRetries: 0 });
});

after(async () => {
  await gateway?.stop();
});

const textOf = (message) =>
  message.content
    .filter((block) => block.type === 'text')
    .map((block) => block.text)
    .join('');

test('a message is charged its usage', async () => {
  const spend = await meter(gateway);
  const { data: message, response } = await client.messages
    .create({ model: MODEL, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: ask(9) }] })
    .withResponse();

  assert.equal(message.stop_reason, 'end_turn');
  assert.equal(message.usage.output_tokens, 9);
  assert.equal(words(textOf(message)), 9);
  const expected = messagesCost(MODEL, message.usage);
  await spend.assertCharged(expected);
  assert.equal(Number(response.headers.get('x-tollgate-cost-usd-micros')), expected);
});

test('a message priced with cache reads and writes apart', async () => {
  const context = Array(4).fill('Here is some shared context that a prompt cache would hold.').join(' ');
  const spend = await meter(gateway);
  const message = await client.messages.create({
    model: 'claude-opus-4-1',
    max_tokens: MAX_TOKENS,
    messages: [{ role: 'user', content: `${context} mock:cached=10 mock:cache_write=14 mock:tokens=3` }],
  });

  assert.equal(message.usage.cache_read_input_tokens, 10);
  assert.equal(message.usage.cache_creation_input_tokens, 14);
  await spend.assertCharged(messagesCost('claude-opus-4-1', message.usage));
});

test('a raw message stream is charged its final, cumulative usage', async () => {
  const spend = await meter(gateway);
  const stream = await client.messages.create({
    model: MODEL,
    max_tokens: MAX_TOKENS,
    messages: [{ role: 'user', content: ask(7, 'mock:cached=2') }],
    stream: true,
  });
  const events = [];
  for await (const event of stream) events.push(event);

  assert.equal(events[0].type, 'message_start');
  assert.equal(events.at(-1).type, 'message_stop');
  const text = events
    .filter((event) => event.type === 'content_block_delta' && event.delta.type === 'text_delta')
    .map((event) => event.delta.text)
    .join('');
  assert.equal(words(text), 7);
  // message_start carries the input; each message_delta repeats every count
  // cumulatively, replacing (never adding to) what came before.
  const usage = { ...events[0].message.usage };
  for (const event of events.filter((e) => e.type === 'message_delta')) {
    for (const field of USAGE_FIELDS) {
      if (event.usage[field] != null) usage[field] = event.usage[field];
    }
  }
  assert.equal(usage.output_tokens, 7);
  assert.equal(usage.cache_read_input_tokens, 2);
  await spend.assertCharged(messagesCost(MODEL, usage));
});

test('the message stream helper gives the final message', async () => {
  const spend = await meter(gateway);
  const stream = client.messages.stream({
    model: MODEL,
    max_tokens: MAX_TOKENS,
    messages: [{ role: 'user', content: ask(5) }],
  });
  let text = '';
  stream.on('text', (delta) => {
    text += delta;
  });
  const final = await stream.finalMessage();

  assert.equal(text, textOf(final));
  assert.equal(words(text), 5);
  assert.equal(final.usage.output_tokens, 5);
  await spend.assertCharged(messagesCost(MODEL, final.usage));
});
