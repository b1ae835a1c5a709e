//! Calibration: the temperature applied to a question's probabilities.
//!
//! Raw one-token probabilities are overconfident. The default temperature depends on the
//! option count n: `ln T = a + b·ln(max(n, 2))`, with `(a, b)` measured per model and kept in
//! `calibration/<model>.json`. Tempering is `p_i^(1/T) / Σ p_j^(1/T)`; T = 1 leaves p as is
//! and no T changes the argmax.
//!
//! Every temperature is applied in log space with the largest log-probability subtracted
//! *before* dividing by T ([`tempered_softmax`]): `ln p / T` overflows to `-inf` for every
//! option once T is tiny (a request may send `1e-310`), and `-inf - -inf` is NaN, which the
//! wire writes as `null` in a 200. Subtracting first keeps the top option at exactly 0 for
//! any T, so the result is finite and sums to 1 for every T in (0, ∞] and any input.

use serde::Deserialize;

use crate::shipped::{self, read_path_or_shipped};

/// GLM-5.3-Flash's measured formula, the default for a model without a file.
pub const DEFAULT_FORMULA: Calibration = Calibration {
    a: 0.962,
    b: -0.076,
};

/// `ln T = a + b·ln n`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Calibration {
    /// Intercept of ln T.
    pub a: f64,
    /// Slope of ln T over ln n.
    pub b: f64,
}

impl Calibration {
    /// Loads a calibration file, or a shipped one by name.
    pub fn load(path_or_name: &str) -> Result<Self, String> {
        let text = read_path_or_shipped(path_or_name, shipped::CALIBRATIONS)
            .map_err(|e| format!("calibration {e}"))?;
        let c: Calibration =
            serde_json::from_str(&text).map_err(|e| format!("calibration {path_or_name}: {e}"))?;
        if !(c.a.is_finite() && c.b.is_finite()) {
            return Err(format!(
                "calibration {path_or_name}: a and b must be finite"
            ));
        }
        Ok(c)
    }

    /// The formula for a model configured without a calibration file, in this order: the
    /// file `calibration/<model>.json` under the working directory when there is one (what
    /// `systemone calibrate formula --model <model>` writes), else the shipped file of that name,
    /// else [`DEFAULT_FORMULA`]. Returns where it came from, for the startup log.
    pub fn for_model(model: &str) -> Result<(Self, FormulaSource), String> {
        Self::for_model_in(std::path::Path::new("calibration"), model)
    }

    /// [`Calibration::for_model`] with the local files in `dir`.
    pub fn for_model_in(
        dir: &std::path::Path,
        model: &str,
    ) -> Result<(Self, FormulaSource), String> {
        let local = dir.join(format!("{model}.json"));
        if local.is_file() {
            let local = local.display().to_string();
            return Ok((Self::load(&local)?, FormulaSource::WorkingDir(local)));
        }
        if shipped::CALIBRATIONS.iter().any(|(name, _)| *name == model) {
            return Ok((
                Self::load(model)?,
                FormulaSource::Shipped(model.to_string()),
            ));
        }
        Ok((DEFAULT_FORMULA, FormulaSource::Default))
    }

    /// The formula a model's `compact` layout is calibrated by, fitted on that layout's
    /// prompts (`systemone calibrate formula --layout compact`): `<dir>/<model>.compact.json`, else
    /// the shipped `<model>.compact`; `None` without either (the model's own formula was
    /// fitted on another prompt and does not carry over).
    pub fn compact_for_model_in(
        dir: &std::path::Path,
        model: &str,
    ) -> Result<Option<(Self, FormulaSource)>, String> {
        let (formula, from) = Self::for_model_in(dir, &format!("{model}.compact"))?;
        Ok((from != FormulaSource::Default).then_some((formula, from)))
    }

    /// The default temperature for a question with `n` options (n < 2 counts as 2), kept
    /// within the positive finite floats: a file with extreme `a` or `b` would otherwise
    /// make it 0 or infinite, and an infinite temperature is written as `null` in a 200.
    pub fn temperature(&self, n: usize) -> f64 {
        let n = n.max(2) as f64;
        (self.a + self.b * n.ln())
            .exp()
            .clamp(f64::MIN_POSITIVE, f64::MAX)
    }
}

/// Tempers a probability vector: `p_i^(1/T) / Σ p_j^(1/T)`, computed in log space by
/// [`tempered_softmax`] (an option of probability 0 stays at 0).
pub fn temper(p: &[f64], t: f64) -> Vec<f64> {
    if t == 1.0 {
        return p.to_vec();
    }
    let logs: Vec<f64> = p.iter().map(|x| x.ln()).collect();
    tempered_softmax(&logs, t, &[])
}

/// `1 − H(p)/ln n`, clamped to [0, 1]; 1 for a single option.
pub fn confidence(p: &[f64]) -> f64 {
    if p.len() < 2 {
        return 1.0;
    }
    let h: f64 = p.iter().filter(|x| **x > 0.0).map(|x| -x * x.ln()).sum();
    (1.0 - h / (p.len() as f64).ln()).clamp(0.0, 1.0)
}

/// Probabilities are floored here before `ln` so a zero never becomes `-inf`.
pub const PROB_FLOOR: f64 = 1e-12;

pub fn log_sum_exp(z: &[f64]) -> f64 {
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
}

/// `softmax(z)`.
pub fn softmax(z: &[f64]) -> Vec<f64> {
    let lse = log_sum_exp(z);
    z.iter().map(|v| (v - lse).exp()).collect()
}

/// `softmax(ln p / T + bias)` for one row (no bias when `bias` is empty).
pub fn apply(probs: &[f64], t: f64, bias: &[f64]) -> Vec<f64> {
    let logs: Vec<f64> = probs.iter().map(|p| p.max(PROB_FLOOR).ln()).collect();
    tempered_softmax(&logs, t, bias)
}

/// `softmax(logs / T + bias)`, finite for every input: each entry of the result is in
/// [0, 1] and they sum to 1 (to rounding).
///
/// The largest log is subtracted before the division, so the top option's scaled log is
/// exactly 0 whatever T is; the others are ≤ 0 and may become `-inf` (weight 0) when `1/T`
/// overflows, instead of every option becoming `-inf` and the softmax NaN. T = 0 is the
/// limit (all weight on the top options), T = ∞ the other one (uniform over the options
/// with any probability). A temperature that is NaN or negative never gets here
/// (validation and the file loaders refuse it) and is taken as 1; a NaN log counts as
/// `-inf`; when no log is finite (no option has any probability) the answer is uniform.
pub fn tempered_softmax(logs: &[f64], t: f64, bias: &[f64]) -> Vec<f64> {
    let t = if t >= 0.0 { t } else { 1.0 };
    let top = logs
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return vec![1.0 / logs.len() as f64; logs.len()];
    }
    let z: Vec<f64> = logs
        .iter()
        .enumerate()
        .map(|(j, l)| scaled(l - top, t) + finite_or_zero(bias.get(j).copied()))
        .collect();
    // Normalised by the sum of the weights, not by `exp(z - log_sum_exp(z))`: next to a
    // huge bias, `log_sum_exp` rounds the `ln Σ` away and every top option gets weight 1.
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// `d / t` for a log distance `d ≤ 0` from the top: 0 stays 0 (even at T = 0 or ∞), and
/// what cannot be a number (`-inf / ∞`, a NaN log) is `-inf`, a weight of 0.
fn scaled(d: f64, t: f64) -> f64 {
    if d == 0.0 {
        return 0.0;
    }
    let z = d / t;
    if z.is_nan() {
        f64::NEG_INFINITY
    } else {
        z
    }
}

/// A bias term, 0 when there is none or it is not finite (profiles refuse such biases).
fn finite_or_zero(b: Option<f64>) -> f64 {
    b.filter(|b| b.is_finite()).unwrap_or(0.0)
}

/// Where a model's formula came from when none was configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormulaSource {
    /// `calibration/<model>.json` under the working directory: it overrides the shipped file.
    WorkingDir(String),
    /// The formula shipped for that model name.
    Shipped(String),
    /// No file for the model: [`DEFAULT_FORMULA`], GLM-5.3-Flash's.
    Default,
}

impl std::fmt::Display for FormulaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormulaSource::WorkingDir(path) => write!(f, "{path} in the working directory"),
            FormulaSource::Shipped(name) => write!(f, "shipped {name}"),
            FormulaSource::Default => f.write_str("default (glm-5.3-flash)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compact_layout_has_its_own_formula_or_none() {
        let dir =
            std::env::temp_dir().join(format!("systemone-cal-compact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // A model's own formula, fitted on the reference's bytes, does not carry over.
        std::fs::write(dir.join("toy.json"), r#"{"a": 0.5, "b": 0.1}"#).expect("write");
        assert_eq!(Calibration::compact_for_model_in(&dir, "toy"), Ok(None));
        std::fs::write(
            dir.join("toy.compact.json"),
            r#"{"a": 0.7, "b": -0.2, "layout": "compact"}"#,
        )
        .expect("write");
        let (compact, from) = Calibration::compact_for_model_in(&dir, "toy")
            .expect("loads")
            .expect("found");
        assert_eq!((compact.a, compact.b), (0.7, -0.2));
        assert!(from
            .to_string()
            .ends_with("toy.compact.json in the working directory"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn gemma_ships_a_compact_formula_of_its_own() {
        let dir = std::env::temp_dir().join(format!("systemone-cal-gemma-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (compact, from) = Calibration::compact_for_model_in(&dir, "gemma-3-270m")
            .expect("loads")
            .expect("shipped");
        assert_eq!(from.to_string(), "shipped gemma-3-270m.compact");
        let (own, _) = Calibration::for_model_in(&dir, "gemma-3-270m").expect("shipped");
        assert_ne!(compact, own, "fitted on compact's prompts, not a copy");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_model_without_a_file_finds_its_own() {
        let dir = std::env::temp_dir().join(format!("systemone-cal-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (glm, from) = Calibration::for_model_in(&dir, "glm-5.3").expect("shipped");
        assert_eq!(glm, Calibration::load("glm-5.3").expect("loads"));
        assert_eq!(from.to_string(), "shipped glm-5.3");
        let (other, from) = Calibration::for_model_in(&dir, "toy").expect("default");
        assert_eq!(
            (other, from.to_string().as_str()),
            (DEFAULT_FORMULA, "default (glm-5.3-flash)")
        );
        // What `systemone calibrate formula --model toy` writes is picked up by name.
        std::fs::write(dir.join("toy.json"), r#"{"a": 0.5, "b": 0.1}"#).expect("write");
        let (toy, from) = Calibration::for_model_in(&dir, "toy").expect("local");
        assert_eq!((toy.a, toy.b), (0.5, 0.1));
        assert!(
            matches!(&from, FormulaSource::WorkingDir(p) if p.ends_with("toy.json")),
            "{from}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn default_formula_matches_the_reference_values() {
        let c = DEFAULT_FORMULA;
        assert!((c.temperature(2) - 2.4826).abs() < 1e-4);
        assert!((c.temperature(1) - c.temperature(2)).abs() < 1e-15);
        assert!((c.temperature(10) - 2.1968).abs() < 1e-4);
        assert!((c.temperature(151) - 1.7873).abs() < 1e-4);
    }

    #[test]
    fn shipped_files_load_by_name() {
        assert_eq!(
            Calibration::load("glm-5.3-flash").expect("ships"),
            DEFAULT_FORMULA
        );
        let kimi = Calibration::load("kimi-k2.6").expect("ships");
        assert_eq!((kimi.a, kimi.b), (1.069, -0.095));
        assert!(Calibration::load("nope").is_err());
    }

    #[test]
    fn tempering_keeps_the_argmax_and_flattens() {
        let p = [0.7, 0.2, 0.1];
        let q = temper(&p, 2.0);
        assert!((q.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(q[0] > q[1] && q[1] > q[2]);
        assert!(q[0] < p[0]);
        assert_eq!(temper(&p, 1.0), p.to_vec());
    }

    #[test]
    fn confidence_is_one_for_certainty_and_zero_for_uniform() {
        assert_eq!(confidence(&[1.0, 0.0]), 1.0);
        assert!(confidence(&[0.25; 4]).abs() < 1e-12);
        assert_eq!(confidence(&[1.0]), 1.0);
    }
}
