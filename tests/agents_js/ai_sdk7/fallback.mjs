// An agent that falls back to another model when its own fails, on @ai-sdk/otel (AI SDK 7).
// One process serves one run: OTEL_RESOURCE_ATTRIBUTES=decisionboard.run_id=… ties the
// attempts' traces into it.
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { detectResources, envDetector } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { openai } from "@ai-sdk/openai";
import { OpenTelemetry } from "@ai-sdk/otel";
import { generateText, registerTelemetry } from "ai";

const provider = new NodeTracerProvider({
  resource: detectResources({ detectors: [envDetector] }), // reads OTEL_RESOURCE_ATTRIBUTES
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
registerTelemetry(new OpenTelemetry());

for (const model of ["gpt-4o-mini", "gpt-4.1-mini"]) {
  try {
    const { text } = await generateText({
      model: openai.chat(model),
      prompt: "What is the weather in Oslo?",
      maxRetries: 0,
      telemetry: { functionId: "support" },
    });
    console.log(text);
    break;
  } catch (error) {
    console.error(`${model} failed: ${error.message}`);
  }
}
await provider.shutdown();
