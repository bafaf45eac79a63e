// AI SDK 4 to 6: the SDK's own telemetry, exported over OTLP to Decisionboard.
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS as for any OTLP exporter;
// OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server) for the provider.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { openai } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();

const result = await generateText({
  model: openai.chat("gpt-4o-mini"),
  prompt: "What is the weather in Oslo and Paris? Then find the baggage rules.",
  tools: {
    get_weather: tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => `sunny in ${city}`,
    }),
    search_docs: tool({
      description: "Search the help pages",
      inputSchema: z.object({ query: z.string() }),
      execute: async ({ query }) => `3 pages on ${query}`,
    }),
  },
  stopWhen: stepCountIs(5),
  // The second step goes to another model and must search the docs: a swap and a forced tool.
  prepareStep: ({ stepNumber }) =>
    stepNumber === 1
      ? { model: openai.chat("gpt-4o"), toolChoice: { type: "tool", toolName: "search_docs" } }
      : undefined,
  experimental_telemetry: {
    isEnabled: true,
    functionId: "support", // the agent
    metadata: { sessionId: "sess-42", userId: "user-7" }, // the session and user
  },
});
console.log(result.text);
await provider.shutdown(); // flushes the last spans
