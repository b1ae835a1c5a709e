//! The load shapes the load benches send: `questions` choice questions of `options` options
//! each about the ~1,000-character ticket ([`super::ticket_state`]).

use serde_json::{json, Value};

use super::{route_criteria, ticket_state, ROUTE_INSTRUCTIONS};

/// One load shape: `questions` choice questions of `options` options each.
#[derive(Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub questions: usize,
    pub options: usize,
}

pub const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "1x4",
        questions: 1,
        options: 4,
    },
    Scenario {
        name: "5x4",
        questions: 5,
        options: 4,
    },
    Scenario {
        name: "1x150",
        questions: 1,
        options: 150,
    },
];

impl Scenario {
    pub fn label(&self) -> String {
        format!("{} q × {} options", self.questions, self.options)
    }

    /// The options of each question: the routing options, or `n` numbered categories.
    pub fn criteria(&self) -> Vec<(String, Value)> {
        if self.options == 4 {
            return route_criteria();
        }
        (0..self.options)
            .map(|i| {
                (
                    format!("category_{i:03}"),
                    json!(format!(
                        "Tickets about topic number {i} of the support taxonomy"
                    )),
                )
            })
            .collect()
    }

    /// The caller's body.
    pub fn body(&self) -> Vec<u8> {
        let criteria: serde_json::Map<String, Value> = self.criteria().into_iter().collect();
        let questions: serde_json::Map<String, Value> = (0..self.questions)
            .map(|i| {
                let name = if self.questions == 1 {
                    "route".to_string()
                } else {
                    format!("route_{i}")
                };
                let q = json!({"type": "choice", "instructions": ROUTE_INSTRUCTIONS, "criteria": criteria});
                (name, q)
            })
            .collect();
        let body = json!({"state": ticket_state(), "questions": questions});
        serde_json::to_vec(&body).expect("serialises")
    }
}
