"""Checks real answers against the OpenAPI description the service serves.

Run by tests/live/openapi.rs as `$SYSTEMONE_PYTHON tests/tools/validate_responses.py FILE`, where FILE
holds {"description": <the /openapi.json document>, "answers": [{"method", "path", "status",
"body"}]}. For each answer it takes the schema the description gives that operation for that
status (application/json), validates the body with jsonschema's Draft 2020-12 validator (the
dialect of OpenAPI 3.1; the whole description is the root, so #/components/... resolve), and
prints one line per problem. Exits 1 when any answer is off its schema or undescribed.
"""

import json
import sys

import jsonschema

with open(sys.argv[1], encoding="utf-8") as f:
    data = json.load(f)
description = data["description"]
problems = []
for answer in data["answers"]:
    method, path, status = answer["method"], answer["path"], str(answer["status"])
    response = description["paths"].get(path, {}).get(method, {}).get("responses", {}).get(status)
    schema = (response or {}).get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        problems.append(f"{method} {path} {status}: the description has no JSON schema for it")
        continue
    root = dict(description, **schema)
    validator = jsonschema.Draft202012Validator(root)
    for error in validator.iter_errors(answer["body"]):
        where = "/".join(str(p) for p in error.absolute_path)
        problems.append(f"{method} {path} {status}: {error.message} at /{where}")
for problem in problems:
    print(problem)
print(f"{len(data['answers'])} answers checked, {len(problems)} problems")
sys.exit(1 if problems else 0)
