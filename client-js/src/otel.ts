/**
 * For agents already on OpenTelemetry (`decisionboard-client/otel`).
 *
 * - `addRecordEvent(span, kind, data)` puts a record on a span as the `decisionboard.<kind>`
 *   event Decisionboard's OTLP endpoint reads (docs/connect.md): lists and objects as JSON
 *   strings, envelope fields as `decisionboard.*` attributes.
 * - `DecisionboardSpanProcessor` sends those events to Decisionboard through a client, as
 *   native records, when their span ends: the decisions reach Decisionboard whichever exporter
 *   the spans go to, and nothing else of the traces does. Each record's id is the one the OTLP
 *   endpoint gives the same event (`otel:<trace>:<span>:<event index>`), so a span also
 *   exported to Decisionboard over OTLP is stored once.
 *
 * Types only come from @opentelemetry/sdk-trace-base (an optional peer); nothing of it is
 * loaded at run time.
 */

import type { Context } from "@opentelemetry/api";
import type { ReadableSpan, Span, SpanProcessor } from "@opentelemetry/sdk-trace-base";

import type { Envelope } from "./client.js";
import { KIND_NAMES } from "./kinds.js";

/** What the processor needs of a client: `record`, `flush` (a Decisionboard satisfies it). */
export interface RecordSink {
  record(kind: string, data: unknown, envelope: Envelope): string | undefined;
  flush(timeoutMs?: number): Promise<boolean>;
}

type AttributeValue = string | number | boolean | readonly (string | number | boolean | null | undefined)[];
type Attributes = Record<string, AttributeValue | undefined>;

/** Anything with OpenTelemetry's `Span.addEvent(name, attributes, time)`. */
export interface EventTarget {
  addEvent(name: string, attributes?: Attributes, time?: Date | number): unknown;
}

export const PREFIX = "decisionboard.";
const KINDS = new Set<string>(KIND_NAMES);
const ENVELOPE: Record<string, keyof Omit<Envelope, "ts">> = {
  id: "id",
  run_id: "runId",
  parent_run_id: "parentRunId",
  agent: "agent",
  session_id: "sessionId",
};

// The fields each kind declares as a list or an object: a JSON string there is parsed back,
// anywhere else it stays text (a turn's envelope `text` may well be JSON).
const CONTAINERS: Readonly<Record<string, ReadonlySet<string>>> = {
  "tool_choice.pick": new Set(["classifier", "offered", "ranked", "usage", "served"]),
  "tool_choice.pick_error": new Set(["classifier", "served"]),
  "tool_choice.outcome": new Set(["called", "miss"]),
  model_selection: new Set(["request_patch", "capabilities"]),
  turn: new Set(["toolCalls", "toolNameMap", "controlToolMap", "offered"]),
  "classifier.verdict": new Set(),
  notice: new Set(["detail"]),
  "provider.error": new Set(["toolChoice"]),
  reliability: new Set(),
  model_call: new Set(["usage"]),
};

/**
 * The record's fields as span-event attributes, in the documented portable form: scalars as
 * they are, lists and objects as JSON strings; envelope fields (id, runId, parentRunId, agent,
 * sessionId) as `decisionboard.<snake_name>`; null and undefined left out.
 */
export function eventAttributes(
  data: Readonly<Record<string, unknown>>,
  envelope: Partial<Omit<Envelope, "ts">> = {},
): Attributes {
  const attributes: Attributes = {};
  for (const [key, value] of Object.entries(data)) {
    if (value === null || value === undefined) continue;
    attributes[key] = typeof value === "object" ? JSON.stringify(value) : (value as AttributeValue);
  }
  for (const [wire, name] of Object.entries(ENVELOPE)) {
    const value = envelope[name];
    if (value !== undefined) attributes[PREFIX + wire] = value;
  }
  return attributes;
}

/**
 * Add the record to `span` as the event `decisionboard.<kind>`; never throws. Returns whether
 * the event was added. `time` is the record's time (the event's), now when left out.
 */
export function addRecordEvent(
  span: EventTarget,
  kind: string,
  data: Readonly<Record<string, unknown>>,
  options: Partial<Omit<Envelope, "ts">> & { time?: Date | number } = {},
): boolean {
  try {
    const { time, ...envelope } = options;
    span.addEvent(PREFIX + kind, eventAttributes(data, envelope), time);
    return true;
  } catch {
    return false; // never into the agent's code
  }
}

/** The `decisionboard.<kind>` event's attributes as the record's envelope fields and data. */
export function recordFromEvent(
  kind: string,
  attributes: Readonly<Record<string, unknown>>,
): { envelope: Partial<Omit<Envelope, "ts">>; data: Record<string, unknown> } {
  const envelope: Partial<Omit<Envelope, "ts">> = {};
  const data: Record<string, unknown> = {};
  const containers = CONTAINERS[kind] ?? new Set<string>();
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined) continue;
    if (key.startsWith(PREFIX)) {
      const name = ENVELOPE[key.slice(PREFIX.length)];
      if (name !== undefined) envelope[name] = String(value);
      continue;
    }
    const parts = key.split(".");
    const top = parts[0] as string;
    const fitted = containers.has(top) && parts.length === 1 ? parsed(value) : value;
    let target = data;
    for (const part of parts.slice(0, -1)) {
      const inner = target[part];
      if (inner === null || typeof inner !== "object" || Array.isArray(inner)) target[part] = {};
      target = target[part] as Record<string, unknown>;
    }
    target[parts[parts.length - 1] as string] = fitted;
  }
  return { envelope, data };
}

function parsed(value: unknown): unknown {
  if (typeof value !== "string") return value;
  try {
    return JSON.parse(value);
  } catch {
    return value; // not JSON: sent as it is, for the server to accept or reject
  }
}

type HrTime = readonly [number, number];

function hrTimeMs(time: HrTime | undefined): number | undefined {
  return time ? time[0] * 1000 + time[1] / 1e6 : undefined;
}

/** A span as both SDK generations show it (1.x has parentSpanId, 2.x parentSpanContext). */
interface SpanLike {
  attributes: Readonly<Record<string, unknown>>;
  spanContext(): { traceId: string; spanId: string };
  parentSpanId?: string;
  parentSpanContext?: { spanId: string };
}

export interface SpanProcessorOptions {
  /** Spans held open for their children's lookups; past it the oldest is forgotten (10,000). */
  maxOpenSpans?: number;
}

/**
 * Sends the `decisionboard.<kind>` events of each ended span to Decisionboard through `client`.
 *
 * A record's envelope is as the OTLP endpoint would make it: the event's own `decisionboard.*`
 * attributes, else the nearest of the span and its open ancestors holding
 * `decisionboard.run_id` (the run), `decisionboard.agent` or `gen_ai.agent.name`,
 * `decisionboard.session_id` or `gen_ai.conversation.id`, `decisionboard.parent_run_id`; else
 * the resource's `decisionboard.*`; the run defaults to the trace id. Other spans and events
 * are left alone. `forceFlush()` and `shutdown()` flush the client; stopping the client stays
 * with whoever made it.
 */
export class DecisionboardSpanProcessor implements SpanProcessor {
  private readonly open = new Map<string, SpanLike>();
  private readonly maxOpenSpans: number;

  constructor(
    private readonly client: RecordSink,
    options: SpanProcessorOptions = {},
  ) {
    this.maxOpenSpans = Math.max(0, options.maxOpenSpans ?? 10_000);
  }

  onStart(span: Span, _parentContext: Context): void {
    try {
      if (this.open.size >= this.maxOpenSpans) {
        const oldest = this.open.keys().next();
        if (!oldest.done) this.open.delete(oldest.value);
      }
      const like = span as unknown as SpanLike;
      this.open.set(like.spanContext().spanId, like);
    } catch {
      // A span this cannot read is left to the SDK.
    }
  }

  onEnd(span: ReadableSpan): void {
    try {
      const like = span as unknown as SpanLike & {
        events: readonly { name: string; attributes?: Readonly<Record<string, unknown>>; time: HrTime }[];
        endTime: HrTime;
        resource?: { attributes: Readonly<Record<string, unknown>> };
      };
      const { traceId, spanId } = like.spanContext();
      this.open.delete(spanId);
      let scope: Envelope | undefined;
      like.events.forEach((event, index) => {
        if (!event.name.startsWith(PREFIX)) return;
        const kind = event.name.slice(PREFIX.length);
        if (!KINDS.has(kind)) return;
        scope ??= this.scope(like, traceId);
        const { envelope, data } = recordFromEvent(kind, event.attributes ?? {});
        this.client.record(kind, data, {
          ...scope,
          ...envelope,
          id: envelope.id ?? `otel:${traceId}:${spanId}:${index}`,
          ts: hrTimeMs(event.time) ?? hrTimeMs(like.endTime) ?? Date.now(),
        } as Envelope);
      });
    } catch {
      // Never into the agent's code, nor the SDK's.
    }
  }

  forceFlush(): Promise<void> {
    return this.client.flush().then(() => undefined, () => undefined);
  }

  shutdown(): Promise<void> {
    return this.forceFlush();
  }

  private scope(span: SpanLike & { resource?: { attributes: Readonly<Record<string, unknown>> } }, traceId: string): Envelope {
    const found: Partial<Record<"runId" | "agent" | "sessionId" | "parentRunId", string>> = {};
    const look = (attributes: Readonly<Record<string, unknown>>) => {
      const pick = (name: keyof typeof found, ...keys: string[]) => {
        if (found[name] !== undefined) return;
        for (const key of keys) {
          const value = attributes[key];
          if (typeof value === "string" && value !== "") {
            found[name] = value;
            return;
          }
        }
      };
      pick("runId", "decisionboard.run_id");
      pick("agent", "decisionboard.agent", "gen_ai.agent.name");
      pick("sessionId", "decisionboard.session_id", "gen_ai.conversation.id");
      pick("parentRunId", "decisionboard.parent_run_id");
    };
    let current: SpanLike | undefined = span;
    for (let depth = 0; current && depth < 256; depth++) {
      look(current.attributes ?? {});
      const parent: string | undefined = current.parentSpanContext?.spanId ?? current.parentSpanId;
      current = parent ? this.open.get(parent) : undefined;
    }
    if (span.resource) {
      const resource = span.resource.attributes;
      look(
        Object.fromEntries(
          Object.entries(resource).filter(([key]) => key.startsWith(PREFIX)),
        ),
      );
    }
    return { ...found, runId: found.runId ?? traceId } as Envelope;
  }
}
