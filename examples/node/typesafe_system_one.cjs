// A noul, a choice and a score through the TypeSafe npm SDK (npm install @typesafe-ai/sdk@0.6.0).
//
//   SYSTEMONE_BASE_URL=http://127.0.0.1:8080 SYSTEMONE_API_KEY=sk-demo-acme node typesafe_system_one.cjs
"use strict";

const { TypeSafeClient, noul, choice, score } = require("@typesafe-ai/sdk");

const client = new TypeSafeClient({
  baseURL: process.env.SYSTEMONE_BASE_URL ?? "http://127.0.0.1:8080",
  // Any value works while the service has no keys; the SDK needs one all the same.
  apiKey: process.env.SYSTEMONE_API_KEY ?? "sk-local",
  defaultModel: process.env.SYSTEMONE_MODEL ?? "gemma-3-270m",
  timeout: 120000, // a CPU backend is slow
});

async function main() {
  const r = await client.systemOne({
    state: "A customer writes: I was charged twice for the same transfer on Monday.",
    questions: {
      refund: noul("Does the customer ask for money back?"),
      team: choice("Which team should handle this?", {
        payments: "wrong or duplicate charges",
        technical: "app and login problems",
        human: null,
      }),
      urgency: score("How urgent is it?", ["Routine", "Soon", "Immediate"]),
    },
  });
  const { refund, team, urgency } = r.answers;
  const list = (probs, name = (k) => k) =>
    Object.entries(probs)
      .map(([k, p]) => `${name(k)} ${p.toFixed(3)}`)
      .join(", ");
  console.log(`model: ${r.model}`);
  console.log(`refund: noul ${refund.noul.toFixed(3)}`);
  console.log(`team: choice ${team.choice} (${list(team.probabilities)})`);
  console.log(`urgency: score ${urgency.score.toFixed(3)} (${list(urgency.probabilities, (k) => urgency.legend[k])})`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
