//! Which traces are exported: the standard `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`,
//! decided once per trace at its root (a child follows its parent, so a trace is whole or
//! absent) and passed upstream in the `traceparent`'s sampled flag.

use std::fmt;

/// The sampler the operator chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sampler {
    /// What decides a trace that starts here: a share of trace ids (1 every, 0 none).
    ratio: f64,
    /// Whether a caller's `traceparent` decides instead (its sampled flag).
    parent_based: bool,
}

/// The default, as every OpenTelemetry SDK's: follow the caller, else export every trace.
const DEFAULT: Sampler = Sampler {
    ratio: 1.0,
    parent_based: true,
};

impl Sampler {
    /// From the standard variables read through `env`; an unknown sampler name is the
    /// default, and a ratio that is not a number in 0..=1 is 1 (as the SDKs do), each with
    /// a warning to log.
    pub(super) fn from_env(env: impl Fn(&str) -> Option<String>) -> (Self, Option<String>) {
        let name = env("OTEL_TRACES_SAMPLER").map(|v| v.trim().to_ascii_lowercase());
        let (sampler, ratio_based) = match name.as_deref().unwrap_or("parentbased_always_on") {
            "always_on" => (Sampler::new(1.0, false), false),
            "always_off" => (Sampler::new(0.0, false), false),
            "traceidratio" => (Sampler::new(1.0, false), true),
            "parentbased_always_on" | "" => (DEFAULT, false),
            "parentbased_always_off" => (Sampler::new(0.0, true), false),
            "parentbased_traceidratio" => (Sampler::new(1.0, true), true),
            other => {
                let warning = format!(
                    "OTEL_TRACES_SAMPLER={other:?} is not a sampler this service knows; parentbased_always_on is used"
                );
                return (DEFAULT, Some(warning));
            }
        };
        if !ratio_based {
            return (sampler, None);
        }
        match ratio(env("OTEL_TRACES_SAMPLER_ARG")) {
            Ok(ratio) => (Sampler { ratio, ..sampler }, None),
            Err(warning) => (sampler, Some(warning)),
        }
    }

    fn new(ratio: f64, parent_based: bool) -> Self {
        Sampler {
            ratio,
            parent_based,
        }
    }

    /// Whether a trace that starts here (no caller's parent) with `trace_id` is exported.
    pub(super) fn root(&self, trace_id: &[u8; 16]) -> bool {
        by_ratio(self.ratio, trace_id)
    }

    /// Whether a trace the caller started (its sampled flag `caller_sampled`) is exported.
    pub(super) fn remote(&self, trace_id: &[u8; 16], caller_sampled: bool) -> bool {
        if self.parent_based {
            caller_sampled
        } else {
            self.root(trace_id)
        }
    }
}

/// `OTEL_TRACES_SAMPLER_ARG` as a ratio: 1 when unset, refused when not in 0..=1.
fn ratio(arg: Option<String>) -> Result<f64, String> {
    let Some(arg) = arg else { return Ok(1.0) };
    match arg.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio between 0 and 1; 1 (every trace) is used"
        )),
    }
}

/// The trace-id ratio rule of the OpenTelemetry SDKs: the low 63 bits of the trace id under
/// `ratio` of their range, so every service that samples by ratio keeps the same traces.
fn by_ratio(ratio: f64, trace_id: &[u8; 16]) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    (u64::from_be_bytes(low) >> 1) < bound
}

impl fmt::Display for Sampler {
    /// The sampler as its variables would name it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.parent_based {
            "parentbased_"
        } else {
            ""
        };
        match self.ratio {
            r if r >= 1.0 => write!(f, "{prefix}always_on"),
            r if r <= 0.0 => write!(f, "{prefix}always_off"),
            r => write!(f, "{prefix}traceidratio {r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(vars: &[(&str, &str)]) -> (Sampler, Option<String>) {
        Sampler::from_env(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    const S: &str = "OTEL_TRACES_SAMPLER";
    const ARG: &str = "OTEL_TRACES_SAMPLER_ARG";

    #[test]
    fn each_standard_name_parses() {
        let cases = [
            ("always_on", "always_on"),
            ("ALWAYS_OFF", "always_off"),
            ("parentbased_always_on", "parentbased_always_on"),
            ("parentbased_always_off", "parentbased_always_off"),
            ("traceidratio", "always_on"),
            ("parentbased_traceidratio", "parentbased_always_on"),
        ];
        for (name, shown) in cases {
            let (got, warning) = sampler(&[(S, name)]);
            assert_eq!((got.to_string().as_str(), warning), (shown, None), "{name}");
        }
        assert_eq!(sampler(&[]), (DEFAULT, None));
    }

    #[test]
    fn a_ratio_comes_from_the_arg_and_a_bad_one_or_name_warns() {
        let (got, _) = sampler(&[(S, "parentbased_traceidratio"), (ARG, "0.25")]);
        assert_eq!(got.to_string(), "parentbased_traceidratio 0.25");
        let (got, warning) = sampler(&[(S, "traceidratio"), (ARG, "2")]);
        assert_eq!(
            (got.to_string().as_str(), warning.is_some()),
            ("always_on", true)
        );
        let (got, warning) = sampler(&[(S, "jaeger_remote")]);
        assert_eq!(got, DEFAULT);
        assert!(warning.is_some_and(|w| w.contains("jaeger_remote")));
    }

    #[test]
    fn parent_based_follows_the_caller_and_the_rest_ignore_it() {
        let id = [7u8; 16];
        let (on, _) = sampler(&[(S, "always_on")]);
        assert!(on.remote(&id, false) && on.root(&id));
        let (off, _) = sampler(&[(S, "always_off")]);
        assert!(!off.remote(&id, true) && !off.root(&id));
        let (parent, _) = sampler(&[(S, "parentbased_always_off")]);
        assert!(parent.remote(&id, true) && !parent.remote(&id, false) && !parent.root(&id));
    }

    #[test]
    fn a_ratio_keeps_the_trace_ids_under_it() {
        let low = |n: u64| {
            let mut id = [0u8; 16];
            id[8..].copy_from_slice(&n.to_be_bytes());
            id
        };
        let half = Sampler::new(0.5, false);
        assert!(half.root(&low(0)));
        assert!(half.root(&low((1 << 62) - 1)));
        assert!(!half.root(&low(1 << 63)));
        assert!(!Sampler::new(0.0, false).root(&low(0)));
    }
}
