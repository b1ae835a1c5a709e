"""Names a server-side calibration profile through the official TypeSafe Python SDK.

Run by tests/profiles.rs as `$SYSTEMONE_PYTHON tests/sdk/profile.py`, with
TYPESAFE_BASE_URL pointing at a systemone service that serves the profile `spam` and
TYPESAFE_API_KEY set. The SDK has no `calibration` parameter; like any SDK user who needs
an extension field, the script passes it in `extra_body`. The SDK must accept the answers
(which carry `calibration`, `prediction_set` and `automate` beyond its schema).

Prints one JSON object: the noul probability and the choice's probabilities as the SDK
parsed them.
"""

import json

from typesafe_sdk import Choice, Noul, RetryPolicy, TypeSafeClient

with TypeSafeClient(timeout=30.0, retry=RetryPolicy(max_retries=0)) as client:
    r = client.system_one(
        state={"subject": "WIN A PRIZE", "body": "click here"},
        questions={
            "spam": Noul(instructions="Is this email spam?"),
            "kind": Choice(criteria={"spam": None, "ham": None, "news": None}),
        },
        extra_body={"calibration": "spam"},
    )
    print(json.dumps({
        "noul": r.answers["spam"].noul,
        "kind": dict(r.answers["kind"].probabilities),
        "request_id": r.request_id,
    }))
