"""Drives the official Cohere Python SDK (cohere==7.3.1) against a running systemone service.

Run by tests/live/llamacpp_rerank.rs as `$SYSTEMONE_PYTHON tests/sdk/cohere_rerank.py`, with
SYSTEMONE_BASE_URL (the service root, http://127.0.0.1:PORT), RERANK_MODEL, RERANK_QUERY and
RERANK_DOCUMENTS (a JSON list) in the environment. Like any SDK user it builds
`cohere.ClientV2(base_url=..., api_key=...)` and calls `client.rerank(...)`; it prints one JSON
object per scenario on stdout, keyed by "scenario", with what the SDK parsed. The Rust test
checks them against the service's own /v1/systemone answers.

Scenarios, in order:
  all        every document ranked (no top_n)
  top3       top_n=3
  truncated  max_tokens_per_doc=8: the long documents are cut and meta.warnings says so
  invalid    an empty documents list: the SDK raises UnprocessableEntityError (422)
"""

import json
import os
import sys

import cohere
from cohere.core.request_options import RequestOptions
from cohere.errors import UnprocessableEntityError


def emit(scenario, **fields):
    print(json.dumps({"scenario": scenario, **fields}), flush=True)


def parsed(response):
    """What the SDK parsed: the typed results and meta."""
    meta = response.meta
    return {
        "type": type(response).__name__,
        "id": response.id,
        "results": [
            {"index": r.index, "relevance_score": r.relevance_score, "type": type(r).__name__}
            for r in response.results
        ],
        "search_units": meta.billed_units.search_units if meta and meta.billed_units else None,
        "cached_tokens": meta.cached_tokens if meta else None,
        "warnings": meta.warnings if meta else None,
    }


model = os.environ["RERANK_MODEL"]
query = os.environ["RERANK_QUERY"]
documents = json.loads(os.environ["RERANK_DOCUMENTS"])
# No retries: a failure must show as a failure. Gemma on 2 cores is slow; allow time.
options = RequestOptions(max_retries=0, timeout=300)
client = cohere.ClientV2(base_url=os.environ["SYSTEMONE_BASE_URL"], api_key="sk-any-value-works")

emit("all", **parsed(client.rerank(model=model, query=query, documents=documents, request_options=options)))
emit(
    "top3",
    **parsed(client.rerank(model=model, query=query, documents=documents, top_n=3, request_options=options)),
)
emit(
    "truncated",
    **parsed(
        client.rerank(
            model=model, query=query, documents=documents, max_tokens_per_doc=8, request_options=options
        )
    ),
)
try:
    client.rerank(model=model, query=query, documents=[], request_options=options)
    emit("invalid", raised=None)
except UnprocessableEntityError as e:
    emit("invalid", raised=type(e).__name__, status=e.status_code, body=e.body)
except Exception as e:  # noqa: BLE001 - report any other class to the Rust side
    emit("invalid", raised=type(e).__name__, message=str(e))

sys.exit(0)
