// Each provider's usage, as its API returns it, becomes disjoint counts (the figures are the
// Python client's for the same responses).
import assert from "node:assert/strict";
import { test } from "node:test";

import { callUsage, usageFromGemini, usageFromOpenAI } from "decisionboard-client";

test("it counts cached and reasoning tokens once, whichever provider reported them", () => {
  const chat = {
    prompt_tokens: 2006,
    completion_tokens: 300,
    prompt_tokens_details: { cached_tokens: 1920, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 192, audio_tokens: 0 },
  };
  assert.deepEqual(callUsage(chat), { input: 86, output: 108, cacheRead: 1920, thinking: 192 });
  assert.deepEqual(callUsage({ model: "gpt-4o", usage: chat }), callUsage(chat));
  const responses = {
    input_tokens: 9000,
    input_tokens_details: { cached_tokens: 8192, cache_write_tokens: 0 },
    output_tokens: 1200,
    output_tokens_details: { reasoning_tokens: 1024 },
  };
  assert.deepEqual(callUsage(responses), { input: 808, output: 176, cacheRead: 8192, thinking: 1024 });
  assert.deepEqual(
    callUsage({
      input_tokens: 50,
      output_tokens: 300,
      cache_creation_input_tokens: 1200,
      cache_read_input_tokens: 4000,
    }),
    { input: 50, output: 300, cacheRead: 4000, cacheWrite: 1200 },
  );
  const gemini = {
    usageMetadata: {
      promptTokenCount: 5000,
      cachedContentTokenCount: 4000,
      candidatesTokenCount: 300,
      thoughtsTokenCount: 200,
    },
  };
  assert.deepEqual(callUsage(gemini), { input: 1000, output: 300, cacheRead: 4000, thinking: 200 });
  assert.deepEqual(usageFromGemini(gemini), callUsage(gemini));
  const langchain = {
    input_tokens: 5250,
    output_tokens: 300,
    input_token_details: { cache_read: 4000, cache_creation: 1200 },
    output_token_details: { reasoning: 100 },
  };
  assert.deepEqual(callUsage(langchain), {
    input: 50,
    output: 200,
    cacheRead: 4000,
    cacheWrite: 1200,
    thinking: 100,
  });
  assert.deepEqual(callUsage({ input: 5, output: 1 }), { input: 5, output: 1 });
});

test("a shape it does not know, or an object that throws, is undefined, never an error", () => {
  assert.equal(callUsage({ tokens: 5 }), undefined);
  assert.equal(callUsage(null), undefined);
  assert.equal(callUsage("5"), undefined);
  const hostile = {
    get usage() {
      throw new Error("no");
    },
  };
  assert.equal(callUsage(hostile), undefined);
  assert.equal(usageFromOpenAI(hostile), undefined);
});
