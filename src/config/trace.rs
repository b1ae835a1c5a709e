//! [`TraceSettings`]: whether the service exports traces, and where to (`--otlp-traces-endpoint`
//! or the standard `OTEL_*` environment; docs/operations/tracing.md).

use clap::Args;

use super::error::ConfigError;

/// Where traces go; off unless an endpoint is given.
#[derive(Debug, Clone, Default, Args)]
pub struct TraceSettings {
    /// OTLP/HTTP (protobuf) endpoint to export traces to, e.g.
    /// `http://127.0.0.1:4318/v1/traces` (a URL with no path gets `/v1/traces`). Off by
    /// default, and then no span is made; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` turn it on too. Sampling (`OTEL_TRACES_SAMPLER`, `_ARG`),
    /// the service's name and resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`),
    /// the collector's headers (`OTEL_EXPORTER_OTLP_HEADERS`) and the export queue
    /// (`OTEL_BSP_*`) are the standard variables (docs/operations/tracing.md).
    #[arg(long, env = "SYSTEMONE_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,
}

/// The standard variables that name the traces endpoint, most specific first.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

impl TraceSettings {
    /// The URL traces are posted to, or `None` when they are off: the flag (with
    /// `/v1/traces` when it has no path), else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it
    /// is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` (the OTLP spec's rules);
    /// off whatever they say under `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    pub fn endpoint(&self) -> Result<Option<String>, ConfigError> {
        self.endpoint_in(|name| std::env::var(name).ok())
    }

    /// [`TraceSettings::endpoint`] with the environment read through `env`.
    pub fn endpoint_in(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        let set = |name: &str| {
            env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let (source, url) = match (&self.otlp_traces_endpoint, set(TRACES_ENDPOINT)) {
            (Some(flag), _) => ("--otlp-traces-endpoint", with_traces_path(flag.trim())),
            (None, Some(url)) => (TRACES_ENDPOINT, url),
            (None, None) => match set(ENDPOINT) {
                Some(base) => (
                    ENDPOINT,
                    format!("{}/v1/traces", base.trim_end_matches('/')),
                ),
                None => return Ok(None),
            },
        };
        if disabled {
            return Ok(None);
        }
        check_url(source, &url)?;
        Ok(Some(url))
    }
}

/// `url` with `/v1/traces` when it has no path of its own.
fn with_traces_path(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    if rest.trim_end_matches('/').contains('/') {
        url.to_owned()
    } else {
        format!("{}/v1/traces", url.trim_end_matches('/'))
    }
}

/// Refuses an endpoint that is not an `http://` or `https://` URL, naming where it came from.
fn check_url(source: &str, url: &str) -> Result<(), ConfigError> {
    let parsed: Result<http::Uri, _> = url.parse();
    match parsed {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(())
        }
        _ => Err(ConfigError::Invalid(format!(
            "{source}: {url:?} is not an http:// or https:// URL (the OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(flag: Option<&str>, env: &[(&str, &str)]) -> Result<Option<String>, ConfigError> {
        let settings = TraceSettings {
            otlp_traces_endpoint: flag.map(str::to_owned),
        };
        settings.endpoint_in(|name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn off_unless_an_endpoint_is_named() {
        assert_eq!(endpoint(None, &[]).ok(), Some(None));
        assert_eq!(endpoint(None, &[(ENDPOINT, " ")]).ok(), Some(None));
    }

    #[test]
    fn the_flag_then_the_traces_variable_then_the_base_one() {
        let both = [(TRACES_ENDPOINT, "http://t:1/x"), (ENDPOINT, "http://b:2")];
        let got = |flag, env| endpoint(flag, env).ok().flatten();
        assert_eq!(
            got(Some("http://f:3"), &both).as_deref(),
            Some("http://f:3/v1/traces")
        );
        assert_eq!(
            got(Some("http://f:3/p"), &both).as_deref(),
            Some("http://f:3/p")
        );
        assert_eq!(got(None, &both).as_deref(), Some("http://t:1/x"));
        assert_eq!(
            got(None, &both[1..]).as_deref(),
            Some("http://b:2/v1/traces")
        );
    }

    #[test]
    fn the_sdk_switches_turn_it_off() {
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(endpoint(Some("http://f:3"), &[off]).ok(), Some(None));
        }
    }

    #[test]
    fn a_bad_url_is_refused_naming_its_source() {
        let e = endpoint(None, &[(ENDPOINT, "collector:4318")]).expect_err("refused");
        assert!(e.to_string().contains(ENDPOINT), "{e}");
        let e = endpoint(Some("ftp://x"), &[]).expect_err("refused");
        assert!(e.to_string().contains("--otlp-traces-endpoint"), "{e}");
    }
}
