"""Drives the official OpenAI Python SDK (openai==3.51.0) against a running systemone service.

Run by tests/live/llamacpp_decisions.rs as `$SYSTEMONE_PYTHON tests/sdk/openai_decisions.py`, with
SYSTEMONE_BASE_URL (the service root, http://127.0.0.1:PORT) and DECISIONS_MODEL in the
environment. Like any SDK user it builds `openai.OpenAI(base_url=<root>/v1, api_key=...)` and
calls `client.decisions.create(...)`; it prints one JSON object per scenario on stdout, keyed by
"scenario", with what the SDK parsed (class names included). The Rust test checks them against
the service's own /v1/systemone answers to the same questions.

Scenarios, in order:
  decide    a string input; a named predicate, a string choice, a boolean-valued choice, a
            score and an unnamed predicate
  messages  an input of messages: a system message, then a user message of text and JSON parts
  invalid   a choice with one choice: the SDK raises BadRequestError (400) with `param` set
"""

import json
import os
import sys

import openai

INPUT = "Customer: I was charged twice for my March invoice and I want the extra charge refunded today."

QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for a refund?"},
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team should handle this ticket?",
        "choices": [
            {"value": "billing", "description": "charges, invoices and refunds"},
            {"value": "bug"},
            {"value": "other", "description": "anything else"},
        ],
    },
    {
        "type": "choice",
        "name": "escalate",
        "instructions": "Should a human look at this today?",
        "choices": [{"value": True}, {"value": False}],
    },
    {
        "type": "score",
        "name": "urgency",
        "instructions": "How urgent is this ticket?",
        "levels": [
            {"label": "routine"},
            {"label": "soon", "description": "within a day"},
            {"label": "immediate"},
        ],
    },
    {"type": "predicate", "instructions": "Is the customer angry?"},
]

MESSAGES = [
    {"role": "system", "content": "Tickets come from the support inbox."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Please look at my account."},
            {"type": "input_json", "data": {"plan": "pro", "open_invoices": 2}},
        ],
    },
]


def emit(scenario, **fields):
    print(json.dumps({"scenario": scenario, **fields}), flush=True)


def answer_fields(answer):
    """What the SDK parsed for one answer, with its class."""
    fields = {"class": type(answer).__name__, "type": answer.type, "name": answer.name}
    if answer.type == "predicate":
        fields["probability"] = answer.probability
    elif answer.type == "choice":
        fields["choice"] = answer.choice
        fields["confidence"] = answer.confidence
        fields["probabilities"] = [
            {"value": p.value, "value_is_bool": isinstance(p.value, bool), "probability": p.probability}
            for p in answer.probabilities
        ]
    elif answer.type == "score":
        fields["score"] = answer.score
        fields["confidence"] = answer.confidence
        fields["probabilities"] = [
            {"value": p.value, "label": p.label, "probability": p.probability} for p in answer.probabilities
        ]
    return fields


def parsed(decision):
    usage = decision.usage
    return {
        "class": type(decision).__name__,
        "model": decision.model,
        "answers": [answer_fields(a) for a in decision.answers],
        "usage": {
            "input_tokens": usage.input_tokens,
            "cached_tokens": usage.input_tokens_details.cached_tokens,
            "output_tokens": usage.output_tokens,
            "reasoning_tokens": usage.output_tokens_details.reasoning_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


model = os.environ["DECISIONS_MODEL"]
# No retries: a failure must show as a failure. Gemma on 2 cores is slow; allow time.
client = openai.OpenAI(
    base_url=os.environ["SYSTEMONE_BASE_URL"] + "/v1",
    api_key="sk-any-value-works",
    max_retries=0,
    timeout=300,
)

emit("decide", **parsed(client.decisions.create(model=model, input=INPUT, questions=QUESTIONS)))
emit(
    "messages",
    **parsed(client.decisions.create(model=model, input=MESSAGES, questions=QUESTIONS[:1], safety_identifier="u-1")),
)
try:
    client.decisions.create(
        model=model,
        input=INPUT,
        questions=[{"type": "choice", "instructions": "Pick one.", "choices": [{"value": "only"}]}],
    )
    emit("invalid", raised=None)
except openai.BadRequestError as e:
    emit("invalid", raised=type(e).__name__, status=e.status_code, param=e.param, code=e.code, type=e.type)
except Exception as e:  # noqa: BLE001 - report any other class to the Rust side
    emit("invalid", raised=type(e).__name__, message=str(e))

sys.exit(0)
