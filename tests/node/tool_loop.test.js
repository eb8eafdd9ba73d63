// A function-tool loop through the gateway with the official Node SDKs: the
// model calls the tool, the client sends the result back, the model answers
// with text; each call is charged exactly the usage the SDK saw.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { chatCost, meter, messagesCost, startGateway, words } from './harness.js';

const PROMPT = 'What is the weather in Paris? mock:tokens=6';
const FORECAST = JSON.stringify({ forecast: 'sunny', celsius: 21 });
const PARAMETERS = {
  type: 'object',
  properties: { city: { type: 'string', description: 'The city to look up' } },
  required: ['city'],
  additionalProperties: false,
};

let gateway;
let openai;
let anthropic;

before(async () => {
  gateway = await startGateway();
  openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: gateway.key, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gateway.url, apiKey: gateway.key, maxRetries: 0 });
});

after(async () => {
  await gateway?.stop();
});

const CHAT_MODEL = 'gpt-4o-mini';
const CHAT_TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: PARAMETERS } },
];

async function chatTurn(messages, stream) {
  if (!stream) return openai.chat.completions.create({ model: CHAT_MODEL, messages, tools: CHAT_TOOLS });
  const runner = openai.chat.completions.stream({
    model: CHAT_MODEL,
    messages,
    tools: CHAT_TOOLS,
    stream_options: { include_usage: true },
  });
  return runner.finalChatCompletion();
}

for (const stream of [false, true]) {
  test(`chat completions tool loop (${stream ? 'streamed' : 'whole'})`, async () => {
    const messages = [{ role: 'user', content: PROMPT }];
    let spend = await meter(gateway);
    const first = await chatTurn(messages, stream);
    assert.equal(first.choices[0].finish_reason, 'tool_calls');
    const [call] = first.choices[0].message.tool_calls;
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(Object.keys(JSON.parse(call.function.arguments)), ['city']);
    assert.ok(first.usage.completion_tokens > 0);
    await spend.assertCharged(chatCost(CHAT_MODEL, first.usage));

    spend = await meter(gateway);
    messages.push(
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: call.id, type: 'function', function: call.function }],
      },
      { role: 'tool', tool_call_id: call.id, content: FORECAST },
    );
    const second = await chatTurn(messages, stream);
    assert.equal(second.choices[0].finish_reason, 'stop');
    assert.equal(words(second.choices[0].message.content), 6);
    assert.equal(second.usage.completion_tokens, 6);
    assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
    await spend.assertCharged(chatCost(CHAT_MODEL, second.usage));
  });
}

const CLAUDE_MODEL = 'claude-haiku-4-5';
const CLAUDE_TOOLS = [{ name: 'get_weather', description: 'The weather in a city', input_schema: PARAMETERS }];

async function messagesTurn(messages, stream) {
  const request = { model: CLAUDE_MODEL, max_tokens: 256, messages, tools: CLAUDE_TOOLS };
  if (!stream) return anthropic.messages.create(request);
  return anthropic.messages.stream(request).finalMessage();
}

for (const stream of [false, true]) {
  test(`anthropic messages tool loop (${stream ? 'streamed' : 'whole'})`, async () => {
    const messages = [{ role: 'user', content: PROMPT }];
    let spend = await meter(gateway);
    const first = await messagesTurn(messages, stream);
    assert.equal(first.stop_reason, 'tool_use');
    const [call] = first.content.filter((block) => block.type === 'tool_use');
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(Object.keys(call.input), ['city']);
    await spend.assertCharged(messagesCost(CLAUDE_MODEL, first.usage));

    spend = await meter(gateway);
    messages.push(
      { role: 'assistant', content: [{ type: 'tool_use', id: call.id, name: call.name, input: call.input }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: FORECAST }] },
    );
    const second = await messagesTurn(messages, stream);
    assert.equal(second.stop_reason, 'end_turn');
    const text = second.content
      .filter((block) => block.type === 'text')
      .map((block) => block.text)
      .join('');
    assert.equal(words(text), 6);
    assert.equal(second.usage.output_tokens, 6);
    await spend.assertCharged(messagesCost(CLAUDE_MODEL, second.usage));
  });
}
