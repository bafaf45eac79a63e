// What the live tests need: the product's URL and keys, from the pytest module that started it
// (tests/live/test_client_js.py), and where to write what they sent for it to check.
import { writeFileSync } from "node:fs";
import { join } from "node:path";

function need(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: these tests run against a live server (see tests/live/test_client_js.py)`);
  }
  return value;
}

export const URL_ = need("DECISIONBOARD_URL");
export const KEY = need("DECISIONBOARD_KEY");
export const LIMITED_KEY = need("DECISIONBOARD_LIMITED_KEY");
export const EXAMPLES = need("DECISIONBOARD_EXAMPLES");
const SENT = need("DECISIONBOARD_SENT");

/** Tell the pytest module what was sent, as the server should store it. */
export function sent(name, records) {
  writeFileSync(join(SENT, `${name}.json`), JSON.stringify(records));
}
