// The agent of agent.mjs streaming its answer: streamText's spans on AI SDK 7.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { openai } from "@ai-sdk/openai";
import { OpenTelemetry } from "@ai-sdk/otel";
import { isStepCount, registerTelemetry, streamText, tool } from "ai";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
registerTelemetry(new OpenTelemetry());

const result = streamText({
  model: openai.chat("gpt-4o-mini"),
  prompt: "What is the weather in Oslo?",
  tools: {
    get_weather: tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => `sunny in ${city}`,
    }),
  },
  stopWhen: isStepCount(3),
  telemetry: { functionId: "support" },
});
console.log(await result.text);
await provider.shutdown();
