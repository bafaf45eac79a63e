// The package's entries: ES modules and CommonJS, each with its declarations, and the main entry
// loads nothing of OpenTelemetry.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";

const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

test("both builds export the client, each with its type declarations", async () => {
  const esm = await import("decisionboard-client");
  const cjs = require("decisionboard-client");
  for (const entry of [esm, cjs]) {
    assert.equal(typeof entry.Decisionboard, "function");
    assert.equal(typeof entry.callUsage, "function");
  }
  assert.equal(typeof require("decisionboard-client/otel").DecisionboardSpanProcessor, "function");
  for (const [, conditions] of Object.entries(pkg.exports).filter(([k]) => k !== "./package.json")) {
    for (const { types, default: file } of Object.values(conditions)) {
      assert.ok(existsSync(new URL(`../${types}`, import.meta.url)), types);
      assert.ok(existsSync(new URL(`../${file}`, import.meta.url)), file);
    }
  }
  assert.deepEqual(pkg.dependencies ?? {}, {});
});

test("the main entry and the otel entry load nothing of OpenTelemetry at run time", () => {
  for (const entry of ["decisionboard-client", "decisionboard-client/otel"]) {
    const script = `
      require(${JSON.stringify(entry)});
      const loaded = Object.keys(require.cache).filter((p) => p.includes("@opentelemetry"));
      process.stdout.write(JSON.stringify(loaded));`;
    const run = spawnSync(process.execPath, ["-e", script], { cwd: new URL("..", import.meta.url), encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), []);
  }
});
