"""Names a server-side calibration profile through the official TypeSafe Python SDK.

Run by tests/live/profiles.rs as `$SYSTEMONE_PYTHON tests/sdk/profile.py`, with
TYPESAFE_BASE_URL pointing at a systemone service that serves the profile `spam` and
TYPESAFE_API_KEY set. The SDK has no `calibration` parameter; like any SDK user who needs
an extension field, the script passes it in `extra_body`. The SDK must accept the answers
(which carry `calibration`, `prediction_set` and `automate` beyond its schema).

Prints one JSON object: the noul probability and the choice's probabilities as the SDK
parsed them into its own types, and the covered answer as read through a custom
`response_model` that keeps extra keys (how an SDK user gets `prediction_set`).
"""

import json
from typing import Any

import pydantic
from typesafe_sdk import Choice, Noul, RetryPolicy, TypeSafeClient


class RawAnswers(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    answers: dict[str, dict[str, Any]]


STATE = {"subject": "WIN A PRIZE", "body": "click here"}
QUESTIONS = {
    "spam": Noul(instructions="Is this email spam?"),
    "kind": Choice(criteria={"spam": None, "ham": None, "news": None}),
}

with TypeSafeClient(timeout=30.0, retry=RetryPolicy(max_retries=0)) as client:
    r = client.system_one(state=STATE, questions=QUESTIONS, extra_body={"calibration": "spam"})
    raw = client.system_one(
        state=STATE,
        questions=QUESTIONS,
        extra_body={"calibration": "spam"},
        response_model=RawAnswers,
    )
    print(json.dumps({
        "noul": r.answers["spam"].noul,
        "kind": dict(r.answers["kind"].probabilities),
        "request_id": r.request_id,
        "raw_spam": raw.answers["spam"],
    }))
