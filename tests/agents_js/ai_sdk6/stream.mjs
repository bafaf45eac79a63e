// The agent of agent.mjs streaming its answer: streamText's spans (….doStream) on AI SDK 6.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { openai } from "@ai-sdk/openai";
import { stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();

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
  stopWhen: stepCountIs(3),
  experimental_telemetry: { isEnabled: true, functionId: "support" },
});
console.log(await result.text);
await provider.shutdown();
