"""Drives the official TypeSafe Python SDK with a signed token (a JWT) as its API key.
(Not `token.py`: the script's folder comes first on `sys.path`, and that name would shadow
the standard library's `token` module.)

Run by tests/live/sdk_token.rs as `$SYSTEMONE_PYTHON tests/sdk/signed_token.py`. TYPESAFE_API_KEY is
a token the test signed; TYPESAFE_BAD_TOKEN the same token with its payload changed. Prints
one JSON object per scenario on stdout, one per line, keyed by "scenario":
  answered  a noul asked with the token: the SDK sends it as its bearer, the service answers
  refused   the tampered token: the SDK raises its authentication error with the contract body
"""

import json
import os

from typesafe_sdk import Noul, RetryPolicy, TypeSafeClient


def emit(scenario, **fields):
    print(json.dumps({"scenario": scenario, **fields}), flush=True)


QUESTIONS = {"refund": Noul(instructions="Does the customer want money back?")}
STATE = "Invoice 1042 was charged twice to my card."

with TypeSafeClient(timeout=300.0, retry=RetryPolicy(max_retries=0)) as client:
    r = client.system_one(state=STATE, questions=QUESTIONS)
    emit("answered", noul=r.nouls["refund"].noul, request_id=r.request_id)

bad = os.environ["TYPESAFE_BAD_TOKEN"]
with TypeSafeClient(api_key=bad, timeout=300.0, retry=RetryPolicy(max_retries=0)) as client:
    try:
        client.system_one(state=STATE, questions=QUESTIONS)
        emit("refused", raised=None)
    except Exception as e:  # noqa: BLE001 - report the class to the Rust side
        emit(
            "refused",
            raised=type(e).__name__,
            status=getattr(e, "status", None),
            body=getattr(e, "body", None),
        )
