// AI SDK 4: the recipe of AI SDK 5 and 6 (ai_sdk6/agent.mjs) in AI SDK 4's spelling: tools
// take `parameters`, the loop `maxSteps`, prepareStep is `experimental_prepareStep`, and the
// provider takes its base URL as an option.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, tool } from "ai";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL });

const result = await generateText({
  model: openai.chat("gpt-4o-mini"),
  prompt: "What is the weather in Oslo and Paris? Then find the baggage rules.",
  tools: {
    get_weather: tool({
      description: "The weather in a city",
      parameters: z.object({ city: z.string() }),
      execute: async ({ city }) => `sunny in ${city}`,
    }),
    search_docs: tool({
      description: "Search the help pages",
      parameters: z.object({ query: z.string() }),
      execute: async ({ query }) => `3 pages on ${query}`,
    }),
  },
  maxSteps: 5,
  experimental_prepareStep: ({ stepNumber }) =>
    stepNumber === 1
      ? { model: openai.chat("gpt-4o"), toolChoice: { type: "tool", toolName: "search_docs" } }
      : undefined,
  experimental_telemetry: {
    isEnabled: true,
    functionId: "support",
    metadata: { sessionId: "sess-42", userId: "user-7" },
  },
});
console.log(result.text);
await provider.shutdown();
