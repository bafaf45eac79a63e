// A LangGraph ReAct agent on LangChain.js, traced by OpenInference and exported to Decisionboard.
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:8000/v1/traces
// OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer dbk_…"   (OPENAI_API_KEY, OPENAI_BASE_URL as usual)
import { NodeTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { LangChainInstrumentation } from "@arizeai/openinference-instrumentation-langchain";
import { OpenAIInstrumentation } from "@arizeai/openinference-instrumentation-openai";
import * as CallbackManagerModule from "@langchain/core/callbacks/manager";
import OpenAI from "openai";
import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { z } from "zod";

const provider = new NodeTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
new LangChainInstrumentation({ tracerProvider: provider }).manuallyInstrument(CallbackManagerModule);
// Optional: the openai client's own spans as well. LangChain's spans are not made current, so
// each client span opens a trace of its own; Decisionboard counts each request once.
new OpenAIInstrumentation({ tracerProvider: provider }).manuallyInstrument(OpenAI);

const getWeather = tool(async ({ city }) => `Sunny in ${city}.`, {
  name: "get_weather",
  description: "The weather of a city.",
  schema: z.object({ city: z.string() }),
});
const searchDocs = tool(async ({ query }) => `Nothing found for ${query}.`, {
  name: "search_docs",
  description: "Search the documentation.",
  schema: z.object({ query: z.string() }),
});

// The graph's name is the agent's name: the root span of each run is named after it.
const agent = createReactAgent({
  llm: new ChatOpenAI({ model: "gpt-4o-mini", maxRetries: 0 }),
  tools: [getWeather, searchDocs],
  name: "support",
});
await agent.invoke({ messages: [{ role: "user", content: "Weather in Oslo and Bergen?" }] });

// A model behind a fallback: when the first answers an error, the second is asked.
const writer = new ChatOpenAI({ model: "gpt-4o", maxRetries: 0 }).withFallbacks([
  new ChatOpenAI({ model: "gpt-4.1", maxRetries: 0 }),
]);
await writer.invoke("Write the forecast up.");

await provider.shutdown(); // exports what is left before the process ends
