"""Drives the peer `system-one-adapter` (PyPI, 0.2.1) for `benches/llamacpp.rs`.

Reads one JSON job on stdin:

    {"base_url": "http://127.0.0.1:PORT/v1", "model": "gemma-3-270m", "timeout_s": 25,
     "runs": [{"mode": "structured" | "prompted", "state": "...",
               "questions": {"id": {"type": "choice", "instructions": "...",
                                    "criteria": {"label": "description" | null, ...}}}}]}

and runs each call once, in order, with the adapter's README configuration
(`llm_answer_mode="probabilities"`, `normalize_probabilities=True`, no retries) against an
`OpenAIProvider(model, base_url=..., api="chat_completions")`:

* `structured`: `structured_outputs=True` (the provider sends a strict `json_schema`
  `response_format`, which llama-server turns into a grammar);
* `prompted`: `structured_outputs=False` (the schema goes into the system prompt and the
  model must write the JSON on its own).

Every call is bounded twice: the OpenAI client's timeout (`timeout_s`; the provider builds
its client with the SDK's 600 s default, so it is replaced with `with_options`), and a
wall-clock alarm a few seconds later in case a read does not honour it. A timed-out client
closes its connection, which makes llama-server cancel the generation.

Prints one JSON object on stdout: the adapter version and, per run, the latency measured
with `time.perf_counter` around `client.system_one`, whether it succeeded, the error type
and message, token counts and (truncated) what the model wrote.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from importlib import metadata
from typing import Any

TEXT_CHARS = 400
ERROR_CHARS = 400


class HardTimeout(Exception):
    """The wall-clock guard fired (the client's own timeout did not)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise HardTimeout("wall-clock guard fired")


def _last_attempt(error: BaseException) -> tuple[str | None, int | None, int | None]:
    """What the model wrote in the last attempt, and its token counts, from `error.debug`."""
    debug = getattr(error, "debug", None) or {}
    attempts = debug.get("llm_attempts") or []
    if not attempts:
        return None, None, None
    response = attempts[-1].get("llm_response")
    if not isinstance(response, dict):
        return None, None, None
    text = None
    choices = response.get("choices") or []
    if choices and isinstance(choices[0], dict):
        text = (choices[0].get("message") or {}).get("content")
    if text is None:
        text = response.get("text")
    usage = response.get("usage") or {}
    prompt = usage.get("prompt_tokens", response.get("input_tokens"))
    completion = usage.get("completion_tokens", response.get("output_tokens"))
    return text, prompt, completion


def main() -> int:
    job = json.load(sys.stdin)
    out: dict[str, Any] = {"runs": []}
    try:
        from system_one_adapter import Choice, SystemOneAdapterClient
        from system_one_adapter.providers.openai import OpenAIProvider

        out["adapter_version"] = metadata.version("system-one-adapter")
    except Exception as error:  # noqa: BLE001 - reported to the bench, which prints it
        out["import_error"] = f"{type(error).__name__}: {error}"
        print(json.dumps(out))
        return 0

    timeout_s = float(job["timeout_s"])
    provider = OpenAIProvider(job["model"], base_url=job["base_url"], api_key="none", api="chat_completions")
    provider._client = provider._client.with_options(timeout=timeout_s)  # noqa: SLF001
    clients = {
        mode: SystemOneAdapterClient(
            structured_outputs=(mode == "structured"),
            llm_answer_mode="probabilities",
            normalize_probabilities=True,
        )
        for mode in ("structured", "prompted")
    }
    signal.signal(signal.SIGALRM, _alarm)

    for run in job["runs"]:
        questions = {
            qid: Choice(instructions=q["instructions"], criteria=q["criteria"]) for qid, q in run["questions"].items()
        }
        record: dict[str, Any] = {"mode": run["mode"], "ok": False}
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, timeout_s + 5.0)
        try:
            response = clients[run["mode"]].system_one(run["state"], questions, model=provider)
            record["latency_s"] = time.perf_counter() - started
            record["ok"] = True
            record["input_tokens"] = response.usage.input_tokens_total
            record["output_tokens"] = response.usage.output_tokens_total
            record["answers"] = {qid: answer.model_dump(mode="json") for qid, answer in response.answers.items()}
        except BaseException as error:  # noqa: BLE001 - every failure is a result here
            record["latency_s"] = time.perf_counter() - started
            if isinstance(error, KeyboardInterrupt):
                raise
            record["error_type"] = type(error).__name__
            record["error"] = str(error)[:ERROR_CHARS]
            cause = error.__cause__
            if cause is not None and hasattr(cause, "errors"):
                # A pydantic ValidationError: say how many fields broke and how.
                problems = cause.errors()
                first = problems[0] if problems else {}
                where = ".".join(str(part) for part in first.get("loc", ()))
                record["cause"] = f"{len(problems)} invalid field(s), first {where}: {first.get('msg', '?')}"
            elif cause is not None:
                record["cause"] = f"{type(cause).__name__}: {cause}"[:ERROR_CHARS]
            text, prompt, completion = _last_attempt(error)
            record["input_tokens"] = prompt
            record["output_tokens"] = completion
            if text is not None:
                record["text"] = text[:TEXT_CHARS]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out["runs"].append(record)
        print(
            f"peer: {run['mode']} {'ok' if record['ok'] else record.get('error_type')} in {record['latency_s']:.2f} s",
            file=sys.stderr,
            flush=True,
        )

    for client in clients.values():
        client.close()
    provider.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
