"""Cohere's rerank through the cohere Python SDK (pip install cohere==7.3.1).

    SYSTEMONE_BASE_URL=http://127.0.0.1:8080 SYSTEMONE_API_KEY=sk-demo-acme python cohere_rerank.py
"""

import os

import cohere

client = cohere.ClientV2(
    base_url=os.environ.get("SYSTEMONE_BASE_URL", "http://127.0.0.1:8080"),
    api_key=os.environ.get("SYSTEMONE_API_KEY", "sk-local"),
    timeout=120.0,
)

documents = [
    "Refunds take five days to reach your card.",
    "We are closed on Sundays.",
    "Open a dispute in the app to get your money back.",
]
response = client.rerank(
    model=os.environ.get("SYSTEMONE_MODEL", "gemma-3-270m"),
    query="How do I get a refund?",
    documents=documents,
    top_n=2,
)

for rank, r in enumerate(response.results, start=1):
    print(f"{rank}. document {r.index} ({r.relevance_score:.3f}): {documents[r.index]}")
