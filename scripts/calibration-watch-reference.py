#!/usr/bin/env python3
"""The calibration watch's label-free estimators checked against their reference
implementations on the same numbers: the label prior re-estimated by EM (quapy's EMQ.EM,
Saerens et al. 2002) and CBPE's expected accuracy (nannyml's CBPE). Writes
tests/fixtures/calibration_watch_reference.json: the inputs (posteriors, reference outcomes)
and what quapy and nannyml make of them; tests/hermetic/calibration_watch.rs feeds the same
inputs to the watch and asserts agreement within 0.01, so CI needs no Python for it.

Run: scripts/calibration-watch-reference.py  (makes a venv under ~/.cache/systemone with
quapy and nannyml when there is none).

The data: x | y ~ N(2y - 1, 1); the posteriors are the Bayes posteriors under the
reference's prior, so they are calibrated on the reference; the analysis traffic keeps
p(x | y) and moves the label prior (prior shift: what EM undoes). A three-option case checks
EM on more than two options.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "calibration_watch_reference.json"
VENV = Path.home() / ".cache" / "systemone" / "watch-venv"
# nannyml 0.13.1 imports statsmodels without declaring it.
PACKAGES = ["quapy==0.2.3", "nannyml==0.13.1", "statsmodels"]


def ensure_venv():
    """Re-runs this script in the venv that has quapy and nannyml (made if missing)."""
    python = VENV / "bin" / "python"
    if Path(sys.executable) == python or os.environ.get("WATCH_REFERENCE_IN_VENV"):
        return
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    env = dict(os.environ, WATCH_REFERENCE_IN_VENV="1")
    sys.exit(subprocess.run([str(python), __file__, *sys.argv[1:]], env=env).returncode)


def binary(rng, n, prior1, train_prior1):
    """Posteriors [p0, p1] (rounded to 4 places) and labels."""
    import numpy as np

    y = (rng.random(n) < prior1).astype(int)
    x = rng.normal(2 * y - 1, 1.0)
    like1 = train_prior1 * np.exp(-((x - 1) ** 2) / 2)
    like0 = (1 - train_prior1) * np.exp(-((x + 1) ** 2) / 2)
    p1 = np.round(like1 / (like0 + like1), 4)
    return np.stack([1 - p1, p1], axis=1), y


def three(rng, n, prior, train_prior):
    import numpy as np

    means = np.array([-2.0, 0.0, 2.0])
    y = rng.choice(3, size=n, p=prior)
    x = rng.normal(means[y], 1.0)
    like = np.array(train_prior) * np.exp(-((x[:, None] - means[None, :]) ** 2) / 2)
    p = like / like.sum(axis=1, keepdims=True)
    p = np.round(p, 4)
    p[:, 2] = np.round(1 - p[:, 0] - p[:, 1], 4)
    return np.clip(p, 0, 1), y


def em(reference, analysis):
    from quapy.method.aggregative import EMQ

    tr_prev = reference.mean(axis=0)
    qs, _ = EMQ.EM(tr_prev, analysis, epsilon=1e-9)
    return [float(v) for v in qs]


def cbpe(reference, ref_y, analysis):
    import nannyml as nml
    import pandas as pd

    def frame(p, y=None):
        df = pd.DataFrame({"p": p[:, 1], "y_pred": (p[:, 1] > p[:, 0]).astype(int)})
        if y is not None:
            df["y"] = y
        return df

    estimator = nml.CBPE(
        y_pred_proba="p",
        y_pred="y_pred",
        y_true="y",
        problem_type="classification_binary",
        metrics=["accuracy"],
        chunk_number=1,
    )
    estimator.fit(frame(reference, ref_y))
    result = estimator.estimate(frame(analysis)).filter(period="analysis").to_df()
    return float(result[("accuracy", "value")].iloc[0])


def main():
    ensure_venv()
    import warnings

    # nannyml warns that one chunk is few; one chunk over the whole analysis is the point.
    warnings.filterwarnings("ignore", message="The resulting number of chunks is too low")
    import numpy as np
    import quapy
    import nannyml

    rng = np.random.default_rng(20261205)
    ref, ref_y = binary(rng, 3000, 0.3, 0.3)
    shifted, _ = binary(rng, 3000, 0.6, 0.3)
    same, _ = binary(rng, 3000, 0.3, 0.3)
    ref3, _ = three(rng, 2000, [0.2, 0.3, 0.5], [0.2, 0.3, 0.5])
    shifted3, _ = three(rng, 2000, [0.5, 0.3, 0.2], [0.2, 0.3, 0.5])
    cases = {
        "binary": {
            "reference": ref.tolist(),
            "reference_outcomes": ref_y.tolist(),
            "analyses": {
                "shifted": {"posteriors": shifted.tolist()},
                "same": {"posteriors": same.tolist()},
            },
        },
        "three": {
            "reference": ref3.tolist(),
            "analyses": {"shifted": {"posteriors": shifted3.tolist()}},
        },
    }
    for name, analysis in cases["binary"]["analyses"].items():
        p = np.array(analysis["posteriors"])
        analysis["quapy_em_prior"] = em(ref, p)
        analysis["nannyml_cbpe_accuracy"] = cbpe(ref, ref_y, p)
    p3 = np.array(cases["three"]["analyses"]["shifted"]["posteriors"])
    cases["three"]["analyses"]["shifted"]["quapy_em_prior"] = em(ref3, p3)
    out = {
        "made_by": "scripts/calibration-watch-reference.py",
        "quapy": quapy.__version__,
        "nannyml": nannyml.__version__,
        "cases": cases,
    }
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    for name, case in cases.items():
        for a, analysis in case["analyses"].items():
            print(name, a, {k: v for k, v in analysis.items() if k != "posteriors"})


if __name__ == "__main__":
    main()
