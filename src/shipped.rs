//! Data files shipped inside the binary (token tables, calibration files, calibration
//! profiles), and how a flag that names one is read: a path on disk wins, else the shipped
//! copy of that name. Each list is `(name, file text)`.

/// `token-tables/*.json`.
pub const TOKEN_TABLES: &[(&str, &str)] = &[
    (
        "golden-fake",
        include_str!("../token-tables/golden-fake.json"),
    ),
    ("gemma-3", include_str!("../token-tables/gemma-3.json")),
    ("qwen-3", include_str!("../token-tables/qwen-3.json")),
];

/// `calibration/*.json`: temperature formulas.
pub const CALIBRATIONS: &[(&str, &str)] = &[
    (
        "glm-5.3-flash",
        include_str!("../calibration/glm-5.3-flash.json"),
    ),
    ("glm-5.3", include_str!("../calibration/glm-5.3.json")),
    ("kimi-k2.6", include_str!("../calibration/kimi-k2.6.json")),
    (
        "gemma-3-270m",
        include_str!("../calibration/gemma-3-270m.json"),
    ),
    (
        "gemma-3-270m.compact",
        include_str!("../calibration/gemma-3-270m.compact.json"),
    ),
];

/// `calibration/profiles/*.json`: server-side calibration profiles.
pub const PROFILES: &[(&str, &str)] =
    &[("spam", include_str!("../calibration/profiles/spam.json"))];

/// Reads a data file (token table, calibration) from a path, or, when no such file exists,
/// the copy shipped in the binary under that name (`gemma-3` or `token-tables/gemma-3.json`).
pub fn read_path_or_shipped(
    path_or_name: &str,
    shipped: &[(&str, &str)],
) -> Result<String, String> {
    let path = std::path::Path::new(path_or_name);
    if path.is_file() {
        return std::fs::read_to_string(path).map_err(|e| format!("{path_or_name}: {e}"));
    }
    let name = path_or_name
        .rsplit('/')
        .next()
        .unwrap_or(path_or_name)
        .trim_end_matches(".json");
    shipped
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| (*text).to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = shipped.iter().map(|(n, _)| *n).collect();
            format!(
                "{path_or_name}: not a file and not the name of a shipped one (shipped: {})",
                names.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_lists_the_shipped_ones() {
        let err = read_path_or_shipped("gemma3", TOKEN_TABLES).expect_err("not shipped");
        assert!(err.starts_with("gemma3: not a file"), "{err}");
        for name in ["gemma-3", "qwen-3", "golden-fake"] {
            assert!(err.contains(name), "{err}");
        }
        let text = read_path_or_shipped("token-tables/gemma-3.json", TOKEN_TABLES);
        assert!(text.expect("by path or name").contains("\"gemma-3\""));
    }
}
