// AI SDK 7: @ai-sdk/otel's OpenTelemetry integration, exported over OTLP to Decisionboard.
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS as for any OTLP exporter;
// OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server) for the provider.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { openai } from "@ai-sdk/openai";
import { OpenTelemetry } from "@ai-sdk/otel";
import { generateText, isStepCount, registerTelemetry, tool } from "ai";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
// toolChoice: each step's forced tool; runtimeContext: the session and user named below.
registerTelemetry(new OpenTelemetry({ toolChoice: true, runtimeContext: true }));

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
  stopWhen: isStepCount(5),
  // The second step goes to another model and must search the docs: a swap and a forced tool.
  prepareStep: ({ stepNumber }) =>
    stepNumber === 1
      ? { model: openai.chat("gpt-4o"), toolChoice: { type: "tool", toolName: "search_docs" } }
      : undefined,
  telemetry: {
    functionId: "support", // the agent
    includeRuntimeContext: { sessionId: true, userId: true },
  },
  runtimeContext: { sessionId: "sess-42", userId: "user-7" }, // the session and user
});
console.log(result.text);
await provider.shutdown(); // flushes the last spans
