//! How flag values are parsed and defaulted: the parsers clap calls for seconds and counts,
//! and the defaults read back from the flags' own attributes.

use std::time::Duration;

use clap::Args;

/// A flag group with every flag at its `#[arg(default_value…)]`, the environment ignored:
/// the defaults are written once, in the attributes `--help` shows.
pub(super) fn clap_defaults<T: Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None));
    let matches = command
        .try_get_matches_from(["defaults"])
        .expect("every flag has a valid default");
    T::from_arg_matches(&matches).expect("every flag has a valid default")
}

/// A timeout flag as a deadline: 0 is off. The flag's parser has already refused
/// negative, non-finite and absurd values.
pub(super) fn deadline(secs: f64) -> Option<Duration> {
    (secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Parses a count that must be at least 1 (a cap of 0 would refuse everything).
pub(super) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// Parses a window in seconds: like [`seconds`], but more than 0 (an empty window would
/// hold no outcome to judge).
pub(super) fn window_seconds(text: &str) -> Result<f64, String> {
    match seconds(text)? {
        secs if secs > 0.0 => Ok(secs),
        _ => Err(format!("{text:?} is not more than 0 seconds")),
    }
}

/// Parses a timeout in seconds: finite, 0 (off) up to a day.
pub(super) fn seconds(text: &str) -> Result<f64, String> {
    const DAY: f64 = 86_400.0;
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if secs.is_finite() && (0.0..=DAY).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("{secs} is outside 0 (off) to {DAY} seconds"))
    }
}
