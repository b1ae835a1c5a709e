"""OpenAI's Decisions API through the openai Python SDK (pip install openai==3.51.0).

    SYSTEMONE_BASE_URL=http://127.0.0.1:8080 SYSTEMONE_API_KEY=sk-demo-acme python openai_decisions.py
"""

import os

import openai

client = openai.OpenAI(
    base_url=os.environ.get("SYSTEMONE_BASE_URL", "http://127.0.0.1:8080") + "/v1",
    api_key=os.environ.get("SYSTEMONE_API_KEY", "sk-local"),
    timeout=120.0,
)

decision = client.decisions.create(
    model=os.environ.get("SYSTEMONE_MODEL", "gemma-3-270m"),
    input="I was charged twice; please refund the extra charge.",
    questions=[
        {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for a refund?"},
        {
            "type": "choice",
            "name": "team",
            "instructions": "Which team should handle this?",
            "choices": [{"value": "billing", "description": "charges and refunds"}, {"value": "bug"}, {"value": "other"}],
        },
        {
            "type": "score",
            "name": "urgency",
            "instructions": "How urgent is it?",
            "levels": [{"label": "routine"}, {"label": "soon", "description": "within a day"}, {"label": "now"}],
        },
    ],
)

print(f"model: {decision.model}")
for a in decision.answers:
    if a.type == "predicate":
        print(f"{a.name}: predicate {a.probability:.3f}")
    elif a.type == "choice":
        print(f"{a.name}: choice {a.choice} (" + ", ".join(f"{p.value} {p.probability:.3f}" for p in a.probabilities) + ")")
    else:
        print(f"{a.name}: score {a.score:.3f} (" + ", ".join(f"{p.label} {p.probability:.3f}" for p in a.probabilities) + ")")
