// An OpenAI Agents JS run with a handoff, traced by OpenInference and exported to Decisionboard.
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:8000/v1/traces
// OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer dbk_…"   (OPENAI_API_KEY, OPENAI_BASE_URL as usual)
import * as agents from "@openai/agents";
import { NodeTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { OpenAIAgentsInstrumentation } from "@arizeai/openinference-instrumentation-openai-agents";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
// Replaces the SDK's own trace processors: nothing is sent to OpenAI's tracing.
new OpenAIAgentsInstrumentation({ tracerProvider: provider }).manuallyInstrument(agents);
agents.setOpenAIAPI("chat_completions");

const getWeather = agents.tool({
  name: "get_weather",
  description: "The weather of a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => `Sunny in ${city}.`,
});
const booker = new agents.Agent({
  name: "booker",
  instructions: "Book flights.",
  model: "gpt-4o",
});
const triage = new agents.Agent({
  name: "triage",
  instructions: "Help, and hand flight bookings to the booker.",
  model: "gpt-4o-mini",
  tools: [getWeather],
  handoffs: [booker],
});
await agents.run(triage, "Weather in Oslo, then book me a flight.");

await provider.shutdown(); // exports what is left before the process ends
