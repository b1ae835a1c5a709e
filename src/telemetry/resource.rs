//! The resource every batch is sent under: who exported the spans.

use super::client::pairs;

/// `OTEL_RESOURCE_ATTRIBUTES`' pairs, then `OTEL_SERVICE_NAME` as `service.name` (it wins,
/// as the SDKs have it), `service.name` `systemone` when neither names one, and the
/// `telemetry.sdk.*` attributes (this service's own exporter).
pub(super) fn attributes(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut attributes = env("OTEL_RESOURCE_ATTRIBUTES").map_or_else(Vec::new, |l| pairs(&l));
    let named = env("OTEL_SERVICE_NAME")
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    if let Some(name) = named {
        attributes.retain(|(k, _)| k != "service.name");
        attributes.push(("service.name".into(), name));
    } else if !attributes.iter().any(|(k, _)| k == "service.name") {
        attributes.push(("service.name".into(), "systemone".into()));
    }
    for (key, value) in [
        ("telemetry.sdk.name", "systemone"),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ] {
        attributes.push((key.into(), value.into()));
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service_name(vars: &[(&str, &str)]) -> Option<String> {
        let got = attributes(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        });
        got.into_iter()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v)
    }

    #[test]
    fn the_service_name_is_the_variables_else_systemone() {
        assert_eq!(service_name(&[]).as_deref(), Some("systemone"));
        let attrs = (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=gw%201,deployment.environment=prod",
        );
        assert_eq!(service_name(&[attrs]).as_deref(), Some("gw 1"));
        let both = [attrs, ("OTEL_SERVICE_NAME", "edge")];
        assert_eq!(service_name(&both).as_deref(), Some("edge"));
    }
}
