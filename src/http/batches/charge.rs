//! The batch writer's [`Charger`]: the service's limit store, which charges a group of
//! lines in one call and, where it keeps charge ids (`--state-dir`), each line once.

use futures::future::{BoxFuture, FutureExt};

use crate::batch::rows::{Charger, LineCharge};
use crate::quota::{Charge, Quotas, UsageCounts};

impl Charger for Quotas {
    fn charge<'a>(&'a self, lines: &'a [LineCharge]) -> BoxFuture<'a, Result<(), String>> {
        let charges: Vec<Charge> = lines
            .iter()
            .map(|l| Charge {
                id: l.id.clone(),
                name: l.name.clone(),
                counts: UsageCounts::from_array(l.counts),
            })
            .collect();
        async move {
            Quotas::charge(self, &charges)
                .await
                .map_err(|e| e.to_string())
        }
        .boxed()
    }
}
