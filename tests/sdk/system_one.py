"""Drives the official TypeSafe Python SDK against a running systemone service.

Run by tests/live/llamacpp_sdk.rs as `$SYSTEMONE_PYTHON tests/sdk/system_one.py`. Like any SDK user
it reads TYPESAFE_BASE_URL and TYPESAFE_API_KEY from the environment. It prints one JSON
object per scenario on stdout, one per line, keyed by "scenario"; the Rust test checks them.
Each call carries an `x-scenario` header so the recording proxy in front of the service can
tell which wire request belongs to which scenario.

Scenarios, in order:
  roundtrip   a noul, a choice and a score in one small (< 1 KiB, uncompressed) body
  compressed  a body over 1 KiB, which the SDK sends zstd-compressed
  forty       a 40-option choice: numerals 00-39 after Gemma 3's ten single-token labels
  invalid     a 256-option choice (more than the contract's 255): a 422
  models      client.models.list(): every name with a string release_date
"""

import json
import sys

from typesafe_sdk import (
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)
from typesafe_sdk._core.compression import COMPRESSORS, MIN_COMPRESSED_BODY_LENGTH


def emit(scenario, **fields):
    print(json.dumps({"scenario": scenario, **fields}), flush=True)


def scenario(name):
    return {"x-scenario": name}


# No retries: a failure must show as a failure, not be papered over. Gemma on 2 cores can
# queue behind other callers, so allow more than the SDK's 10 s default.
with TypeSafeClient(timeout=300.0, retry=RetryPolicy(max_retries=0)) as client:
    r = client.system_one(
        state="Invoice 1042 was charged twice to my card.",
        questions={
            "refund": Noul(instructions="Does the customer want money back?"),
            "team": Choice(
                instructions="Which team handles it?",
                criteria={"billing": "Payments", "bug": None, "sales": None},
            ),
            "urgency": Score(instructions="How urgent?", criteria=["Routine", "Soon", "Now"]),
        },
        extra_headers=scenario("roundtrip"),
    )
    emit(
        "roundtrip",
        model=r.model,
        request_id=r.request_id,
        x_request_id=r.raw_http_response.headers.get("x-request-id"),
        noul=r.nouls["refund"].noul,
        choice=r.choices["team"].choice,
        choice_probabilities=r.choices["team"].probabilities,
        choice_confidence=r.choices["team"].confidence,
        score=r.scores["urgency"].score,
        score_probabilities={str(k): v for k, v in r.scores["urgency"].probabilities.items()},
        score_legend={str(k): v for k, v in r.scores["urgency"].legend.items()},
        usage={"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens},
        raw=r.raw_http_response.json(),
    )

    long_state = " ".join(
        f"Line {i}: the customer repeats that invoice 1042 was charged twice." for i in range(24)
    )
    r = client.system_one(
        state=long_state,
        questions={"refund": Noul(instructions="Does the customer want money back?")},
        extra_headers=scenario("compressed"),
    )
    emit(
        "compressed",
        zstd_available="zstd" in COMPRESSORS,
        min_compressed=MIN_COMPRESSED_BODY_LENGTH,
        state_bytes=len(long_state.encode()),
        request_id=r.request_id,
        noul=r.nouls["refund"].noul,
        raw=r.raw_http_response.json(),
    )

    r = client.system_one(
        state="The customer ordered the product with the code printed on the invoice.",
        questions={
            "product": Choice(
                instructions="Which product did the customer order?",
                criteria={f"product {i}": None for i in range(40)},
            )
        },
        extra_headers=scenario("forty"),
    )
    emit(
        "forty",
        choice=r.choices["product"].choice,
        probabilities=r.choices["product"].probabilities,
        raw=r.raw_http_response.json(),
    )

    try:
        client.system_one(
            state="Invoice 1042 was charged twice.",
            questions={
                "team": Choice(
                    instructions="Which team?",
                    criteria={f"team{i}": None for i in range(256)},
                )
            },
            extra_headers=scenario("invalid"),
        )
        emit("invalid", raised=None)
    except TypeSafeUnprocessableEntityError as e:
        emit(
            "invalid",
            raised=type(e).__name__,
            status=e.status,
            message=str(e),
            request_id=e.request_id,
            body=e.body,
        )
    except Exception as e:  # noqa: BLE001 - report any other class to the Rust side
        emit("invalid", raised=type(e).__name__, message=str(e))

    listed = client.models.list(extra_headers=scenario("models"))
    emit(
        "models",
        models=[{"name": m.name, "release_date": m.release_date} for m in listed.models],
    )

sys.exit(0)
