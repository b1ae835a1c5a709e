//! How many upstream reads a service made, from its `/metrics`
//! (`systemone_upstream_responses_total`, every dialect and status): what `eval
//! --compare-prior` divides by the answers to report the reads each cost, the position
//! prior's own samples included (answers' `usage` leaves those out: they are not billed).

/// The summed `systemone_upstream_responses_total` series of a `/metrics` text (0 before
/// the first read, when the family has no series yet); `None` when the text is not this
/// service's metrics.
pub(super) fn upstream_reads(metrics: &str) -> Option<f64> {
    const FAMILY: &str = "systemone_upstream_responses_total";
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(FAMILY)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    metrics.contains("systemone_").then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_and_status_is_summed() {
        let text = "# HELP systemone_upstream_responses_total Upstream reads\n\
                    systemone_upstream_responses_total{dialect=\"vllm\",status=\"2xx\"} 7\n\
                    systemone_upstream_responses_total{dialect=\"vllm\",status=\"5xx\"} 1\n\
                    systemone_upstream_responses_totally 5\n";
        assert_eq!(upstream_reads(text), Some(8.0));
        assert_eq!(upstream_reads("systemone_requests_total 3\n"), Some(0.0));
        assert_eq!(upstream_reads("<html>not found</html>"), None);
    }
}
