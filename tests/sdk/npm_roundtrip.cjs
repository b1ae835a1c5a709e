// A noul, a choice and a score in one call through the official npm SDK (@typesafe-ai/sdk).
//
// Run by tests/live/images.rs as `node tests/sdk/npm_roundtrip.cjs` with NODE_PATH set
// to the node_modules that scripts/fetch-npm-sdk.sh installs (outside the repository),
// TYPESAFE_BASE_URL pointing at a systemone service and TYPESAFE_API_KEY set (the SDK
// refuses to start without one). Prints one JSON object on stdout: the parsed answers as
// the SDK returns them, the request id it read from the response, and the raw body.
"use strict";

const { TypeSafeClient, noul, choice, score } = require("@typesafe-ai/sdk");

async function main() {
  // No retries: a failure must show as a failure.
  const client = new TypeSafeClient({ timeout: 30000, retry: { maxRetries: 0 }, logLevel: "off" });
  const { data, response, requestId } = await client
    .systemOne({
      state: { ticket: "Invoice 1042 was charged twice to my card.", channel: "email" },
      questions: {
        refund: noul("Does the customer want money back?"),
        team: choice("Which team handles it?", { billing: "Payments", bug: null, sales: null }),
        urgency: score("How urgent is it?", ["Routine", "Soon", "Now"]),
      },
    })
    .withResponse();
  process.stdout.write(
    `${JSON.stringify({
      sdk_version: require("@typesafe-ai/sdk/package.json").version,
      status: response.status,
      request_id: requestId ?? null,
      x_request_id: response.headers.get("x-request-id"),
      data,
    })}\n`,
  );
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
