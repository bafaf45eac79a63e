// Builds dist/esm (ES modules) and dist/cjs (CommonJS), each with its own type declarations.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
rmSync(join(root, "dist"), { recursive: true, force: true });
for (const [config, type] of [
  ["tsconfig.esm.json", "module"],
  ["tsconfig.cjs.json", "commonjs"],
]) {
  try {
    execFileSync(process.execPath, [tsc, "-p", join(root, config)], { stdio: "inherit" });
  } catch {
    process.exit(1); // tsc has said why
  }
  const out = join(root, "dist", type === "module" ? "esm" : "cjs");
  mkdirSync(out, { recursive: true });
  // The package is "type": "module"; this marks the CommonJS build as CommonJS.
  writeFileSync(join(out, "package.json"), `${JSON.stringify({ type })}\n`);
}
