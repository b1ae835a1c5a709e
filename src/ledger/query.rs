//! Reading the ledger back: pages of records by filter (newest first, keyset pagination on
//! `(at_ms, request_id)`), and the outcomes people recorded on them.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::record::Decision;
use super::store::{decode, Store, StoreError, COLUMNS};

/// Which records a page holds.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this key's records (`None`: every key's, for the admin).
    pub key: Option<String>,
    /// At or after, Unix ms.
    pub since_ms: Option<i64>,
    /// Before, Unix ms.
    pub until_ms: Option<i64>,
    /// Only this configured model.
    pub model: Option<String>,
    /// Only this route.
    pub route: Option<String>,
    /// Only records with (`true`) or without (`false`) a current outcome.
    pub has_outcome: Option<bool>,
    /// Strictly after this position (the previous page's last record).
    pub after: Option<(i64, String)>,
    /// Most records.
    pub limit: u32,
}

/// A recorded outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutcomeRow {
    pub request_id: String,
    /// The question's keyed name hash.
    pub question: String,
    /// The option that was true (noul: 1 yes, 0 no; score: the level).
    pub outcome: usize,
    pub note: Option<String>,
    /// Who recorded it (the key's configured name).
    pub key: String,
    pub at_ms: i64,
    /// When a later outcome replaced it (`None`: current).
    pub replaced_at_ms: Option<i64>,
}

/// A new outcome.
#[derive(Debug, Clone)]
pub struct NewOutcome<'a> {
    pub request_id: &'a str,
    pub question: &'a str,
    pub outcome: usize,
    pub note: Option<&'a str>,
    pub key: &'a str,
    pub at_ms: i64,
}

/// Why an outcome was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// The question has a current outcome and `replace` was not asked.
    #[error("the question already has an outcome")]
    Exists,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for OutcomeError {
    fn from(e: sqlx::Error) -> Self {
        OutcomeError::Store(e.into())
    }
}

/// SQL text and its arguments, numbered as they are added.
#[derive(Default)]
struct Where {
    clauses: Vec<String>,
    texts: Vec<(usize, String)>,
    numbers: Vec<(usize, i64)>,
    next: usize,
}

impl Where {
    /// A text argument's placeholder (`$n`).
    fn slot(&mut self, value: String) -> String {
        self.next += 1;
        self.texts.push((self.next, value));
        format!("${}", self.next)
    }
    fn text(&mut self, clause: &str, value: String) {
        let slot = self.slot(value);
        self.clauses.push(clause.replace('?', &slot));
    }
    fn number(&mut self, clause: &str, value: i64) {
        self.next += 1;
        self.clauses
            .push(clause.replace('?', &format!("${}", self.next)));
        self.numbers.push((self.next, value));
    }
}

impl Store {
    /// One page of records matching `filter`, newest first.
    pub async fn decisions(&self, filter: &Filter) -> Result<Vec<Decision>, StoreError> {
        let mut w = Where::default();
        if let Some(key) = &filter.key {
            w.text("key_name = ?", key.clone());
        }
        if let Some(since) = filter.since_ms {
            w.number("at_ms >= ?", since);
        }
        if let Some(until) = filter.until_ms {
            w.number("at_ms < ?", until);
        }
        if let Some(model) = &filter.model {
            w.text("model = ?", model.clone());
        }
        if let Some(route) = &filter.route {
            w.text("route = ?", route.clone());
        }
        if let Some((at, id)) = &filter.after {
            w.number("at_ms <= ?", *at);
            let at_clause = format!("(at_ms < ${} OR request_id < ?)", w.next);
            w.text(&at_clause, id.clone());
        }
        match filter.has_outcome {
            Some(true) => w.clauses.push(format!("EXISTS ({CURRENT_OUTCOME})")),
            Some(false) => w.clauses.push(format!("NOT EXISTS ({CURRENT_OUTCOME})")),
            None => {}
        }
        let condition = if w.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", w.clauses.join(" AND "))
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions {condition} \
             ORDER BY at_ms DESC, request_id DESC LIMIT {}",
            filter.limit
        );
        let rows = bind_all(&sql, &w).fetch_all(&self.pool()).await?;
        rows.iter().map(decode).collect()
    }

    /// Every outcome (current and replaced) of the records `request_ids`, oldest first.
    pub async fn outcomes(&self, request_ids: &[&str]) -> Result<Vec<OutcomeRow>, StoreError> {
        if request_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut w = Where::default();
        let slots: Vec<String> = request_ids
            .iter()
            .map(|id| w.slot((*id).to_owned()))
            .collect();
        let sql = format!(
            "SELECT request_id, question, outcome, note, key_name, at_ms, replaced_at_ms \
             FROM outcomes WHERE request_id IN ({}) ORDER BY id",
            slots.join(", ")
        );
        let rows = bind_all(&sql, &w).fetch_all(&self.pool()).await?;
        rows.iter().map(outcome_row).collect()
    }

    /// Records `new`: a question with a current outcome is [`OutcomeError::Exists`] unless
    /// `replace`, which marks the current one replaced (it stays, as history). Returns the
    /// outcome replaced, if any.
    pub async fn add_outcome(
        &self,
        new: &NewOutcome<'_>,
        replace: bool,
    ) -> Result<Option<usize>, OutcomeError> {
        let mut tx = self.begin_write().await?;
        let current = sqlx::query(
            "SELECT id, outcome FROM outcomes WHERE request_id = $1 AND question = $2 \
             AND replaced_at_ms IS NULL",
        )
        .bind(new.request_id)
        .bind(new.question)
        .fetch_optional(&mut *tx)
        .await?;
        let mut replaced = None;
        if let Some(row) = current {
            replaced = usize::try_from(row.try_get::<i64, _>(1)?).ok();
            if !replace {
                return Err(OutcomeError::Exists);
            }
            sqlx::query("UPDATE outcomes SET replaced_at_ms = $1 WHERE id = $2")
                .bind(new.at_ms)
                .bind(row.try_get::<i64, _>(0)?)
                .execute(&mut *tx)
                .await?;
        }
        let inserted = sqlx::query(
            "INSERT INTO outcomes (request_id, question, outcome, note, key_name, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(new.request_id)
        .bind(new.question)
        .bind(new.outcome as i64)
        .bind(new.note)
        .bind(new.key)
        .bind(new.at_ms)
        .execute(&mut *tx)
        .await;
        match inserted {
            // Another request recorded one between the check and the insert.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(OutcomeError::Exists),
            Err(e) => Err(e.into()),
            Ok(_) => {
                tx.commit().await?;
                Ok(replaced)
            }
        }
    }
}

/// The condition "this record has a current outcome".
const CURRENT_OUTCOME: &str = "SELECT 1 FROM outcomes o WHERE o.request_id = decisions.request_id \
     AND o.replaced_at_ms IS NULL";

/// `sql` with `w`'s arguments bound in their numbers' order.
fn bind_all<'q>(
    sql: &'q str,
    w: &Where,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    let mut query = sqlx::query(sql);
    for n in 1..=w.next {
        if let Some((_, text)) = w.texts.iter().find(|(i, _)| *i == n) {
            query = query.bind(text.clone());
        } else if let Some((_, number)) = w.numbers.iter().find(|(i, _)| *i == n) {
            query = query.bind(*number);
        }
    }
    query
}

fn outcome_row(row: &AnyRow) -> Result<OutcomeRow, StoreError> {
    Ok(OutcomeRow {
        request_id: row.try_get("request_id")?,
        question: row.try_get("question")?,
        outcome: usize::try_from(row.try_get::<i64, _>("outcome")?).unwrap_or(0),
        note: row.try_get("note")?,
        key: row.try_get("key_name")?,
        at_ms: row.try_get("at_ms")?,
        replaced_at_ms: row.try_get("replaced_at_ms")?,
    })
}
