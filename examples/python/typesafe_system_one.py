"""A noul, a choice and a score through the TypeSafe Python SDK (pip install typesafe-sdk==0.7.5).

    SYSTEMONE_BASE_URL=http://127.0.0.1:8080 SYSTEMONE_API_KEY=sk-demo-acme python typesafe_system_one.py
"""

import os

from typesafe_sdk import Choice, Noul, Score, TypeSafeClient

client = TypeSafeClient(
    base_url=os.environ.get("SYSTEMONE_BASE_URL", "http://127.0.0.1:8080"),
    # Any value works while the service has no keys; the SDK needs one all the same.
    api_key=os.environ.get("SYSTEMONE_API_KEY", "sk-local"),
    model=os.environ.get("SYSTEMONE_MODEL", "gemma-3-270m"),
    timeout=120.0,  # a CPU backend is slow
)

with client:
    r = client.system_one(
        state="A customer writes: I was charged twice for the same transfer on Monday.",
        questions={
            "refund": Noul(instructions="Does the customer ask for money back?"),
            "team": Choice(
                instructions="Which team should handle this?",
                criteria={"payments": "wrong or duplicate charges", "technical": "app and login problems", "human": None},
            ),
            "urgency": Score(instructions="How urgent is it?", criteria=["Routine", "Soon", "Immediate"]),
        },
    )

print(f"model: {r.model}")
print(f"refund: noul {r.nouls['refund'].noul:.3f}")
team = r.choices["team"]
print(f"team: choice {team.choice} (" + ", ".join(f"{k} {p:.3f}" for k, p in team.probabilities.items()) + ")")
urgency = r.scores["urgency"]
levels = ", ".join(f"{urgency.legend[k]} {p:.3f}" for k, p in urgency.probabilities.items())
print(f"urgency: score {urgency.score:.3f} ({levels})")
