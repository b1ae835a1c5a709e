"""Drives the official OpenAI Python SDK (openai==3.51.0) through a batch job against a running
systemone service.

Run by tests/live/llamacpp_batches.rs as `$SYSTEMONE_PYTHON tests/sdk/openai_batches.py`, with
SYSTEMONE_BASE_URL (the service root) and BATCH_FILE (a JSONL file of lines for /v1/systemone) in
the environment. Like any SDK user it builds `openai.OpenAI(base_url=<root>/v1, api_key=...)`,
uploads the file, creates the batch, polls it, reads both files, lists the batches and cancels a
second batch; it prints one JSON object per scenario on stdout, keyed by "scenario".

Scenarios, in order:
  file      client.files.create(purpose="batch"): the SDK's FileObject
  batch     client.batches.create / retrieve until it ends: status, request_counts
  output    client.files.content(output_file_id) and (error_file_id): their lines
  listed    client.batches.list(limit=5): the ids, newest first
  cancel    a second batch of the same file, client.batches.cancel: its status
"""

import json
import os
import sys
import time

import openai


def emit(scenario, **fields):
    print(json.dumps({"scenario": scenario, **fields}), flush=True)


# No retries: a failure must show as a failure. Gemma on 2 cores is slow; allow time.
client = openai.OpenAI(
    base_url=os.environ["SYSTEMONE_BASE_URL"] + "/v1",
    api_key="sk-any-value-works",
    max_retries=0,
    timeout=300,
)

with open(os.environ["BATCH_FILE"], "rb") as f:
    uploaded = client.files.create(file=f, purpose="batch")
emit("file", cls=type(uploaded).__name__, id=uploaded.id, purpose=uploaded.purpose, bytes=uploaded.bytes)

batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/systemone", completion_window="24h")
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    time.sleep(0.2)
    batch = client.batches.retrieve(batch.id)
counts = batch.request_counts
emit(
    "batch",
    cls=type(batch).__name__,
    id=batch.id,
    status=batch.status,
    counts={"total": counts.total, "completed": counts.completed, "failed": counts.failed},
)

output = client.files.content(batch.output_file_id).text
errors = client.files.content(batch.error_file_id).text
emit(
    "output",
    output=[json.loads(line) for line in output.splitlines() if line.strip()],
    errors=[json.loads(line) for line in errors.splitlines() if line.strip()],
)

emit("listed", ids=[b.id for b in client.batches.list(limit=5)])

second = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/systemone", completion_window="24h")
cancelled = client.batches.cancel(second.id)
while cancelled.status == "cancelling":
    time.sleep(0.1)
    cancelled = client.batches.retrieve(second.id)
emit("cancel", status=cancelled.status, counts=cancelled.request_counts.total)

sys.exit(0)
