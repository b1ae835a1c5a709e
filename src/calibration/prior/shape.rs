//! The key a position prior is kept under: what decides where a model's preference for a
//! label position comes from, whose samples taught it, and nothing the caller wrote.

use std::fmt;

use sha2::{Digest, Sha256};

/// Hex digits of a tenant's id in a shape.
const TENANT_HEX: usize = 16;

/// The tenant id a caller's prior is kept under: the first 64 bits of a hash of its name
/// (its key's name, or a token caller's hashed subject), never the name; empty for the
/// one caller of an open service (`None`).
pub fn tenant_id(caller: Option<&str>) -> String {
    caller.map_or_else(String::new, |name| {
        let digest = Sha256::digest(format!("systemone prior tenant\0{name}").as_bytes());
        digest[..TENANT_HEX / 2]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    })
}

/// A question shape within one model's book: its type, its option count, the request's
/// layout and the tenant whose samples it is learned from and whose single reads it
/// corrects (a tenant's crafted questions, read in two orders, can look like any position
/// preference: keyed by tenant, they move only that tenant's own answers). The label scheme is the model's (one per model) and follows from the option
/// count, so it needs no place here. The question's own text is left out on purpose: the
/// prior is a property of the prompt's frame, and keying it by text would leave every
/// shape with one sample (measured on the fake: see `docs/calibration/prior.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PriorShape {
    /// `choice`, `noul` or `score`.
    pub kind: &'static str,
    /// The number of options.
    pub options: usize,
    /// The layout's name (`accuracy`, `cost`, …).
    pub layout: String,
    /// The tenant ([`tenant_id`]): empty for an open service's one caller.
    pub tenant: String,
}

impl fmt::Display for PriorShape {
    /// `noul/2/accuracy`, then `/<tenant id>` for a tenant's: the store's label, made of
    /// bounded values only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.frame())?;
        if !self.tenant.is_empty() {
            write!(f, "/{}", self.tenant)?;
        }
        Ok(())
    }
}

impl PriorShape {
    /// `noul/2/accuracy`: the shape without its tenant, the metric label (tenants are not
    /// a bounded set).
    pub fn frame(&self) -> String {
        format!("{}/{}/{}", self.kind, self.options, self.layout)
    }

    /// The shape a label ([`fmt::Display`]'s) names, when it is one: a known type, an
    /// option count from 2 to 255, a layout of letters and maybe a tenant id of 16 hex
    /// digits (what a store's index holds).
    pub fn parse(label: &str) -> Option<PriorShape> {
        let mut parts = label.split('/');
        let first = parts.next()?;
        let kind = ["choice", "noul", "score"]
            .into_iter()
            .find(|k| *k == first)?;
        let options: usize = parts.next()?.parse().ok()?;
        let layout = parts.next()?;
        let tenant = parts.next().unwrap_or_default();
        let fits = (2..=255).contains(&options)
            && !layout.is_empty()
            && layout.len() <= 16
            && layout.bytes().all(|b| b.is_ascii_lowercase())
            && (tenant.is_empty() || is_tenant(tenant));
        (fits && parts.next().is_none()).then(|| PriorShape {
            kind,
            options,
            layout: layout.to_string(),
            tenant: tenant.to_string(),
        })
    }
}

fn is_tenant(id: &str) -> bool {
    id.len() == TENANT_HEX && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_label_holds_type_count_and_layout_only() {
        let s = PriorShape {
            kind: "choice",
            options: 4,
            layout: "cost".into(),
            tenant: String::new(),
        };
        assert_eq!(s.to_string(), "choice/4/cost");
        assert_eq!(PriorShape::parse("choice/4/cost"), Some(s.clone()));
        let id = tenant_id(Some("acme"));
        assert_eq!((id.len(), tenant_id(None)), (16, String::new()));
        assert_ne!(id, tenant_id(Some("acme2")));
        let theirs = PriorShape {
            tenant: id.clone(),
            ..s
        };
        assert_eq!(theirs.to_string(), format!("choice/4/cost/{id}"));
        assert_eq!(theirs.frame(), "choice/4/cost");
        assert_eq!(PriorShape::parse(&theirs.to_string()), Some(theirs));
        let noul = PriorShape::parse("noul/2/accuracy").map(|s| s.to_string());
        assert_eq!(noul.as_deref(), Some("noul/2/accuracy"));
        for bad in [
            "poll/2/cost",
            "noul/1/cost",
            "noul/2/",
            "noul/2/Cost",
            "noul/2/cost/x",
            "noul/2/cost/0123456789ABCDEF",
            "noul/2/cost/0123456789abcdef/x",
            "noul",
        ] {
            assert_eq!(PriorShape::parse(bad), None, "{bad}");
        }
    }
}
