//! The priors in the Redis of `--redis-url`, shared by replicas.
//!
//! One hash per (model, shape), `PREFIX:prior:{MODEL}:SHAPE`, one field per sum
//! ([`field_names`]), and a set `PREFIX:prior:{MODEL}:shapes` naming the shapes (so a
//! replica learns shapes only others have seen). An exchange is two round trips: a
//! `MULTI` of one `HINCRBYFLOAT` per non-zero sum and an `SADD` per shape (a replica's
//! delta lands whole or not at all), then `SMEMBERS` and one `HMGET` per shape, read and
//! checked once before the write too (a shape holding what is not a finite number, or
//! sums no samples could make, is renamed aside and counted, never served). The braces
//! keep a model's keys in one cluster slot. No expiry: the estimate is meant to outlive
//! restarts. Its own connection (the `redis` crate's manager, as the limits use it): the
//! exchange runs in the background, never on a request's path.

use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::Mutex;

use super::{Exchanged, SetAside, Sums, IMPLAUSIBLE, NOT_A_NUMBER};
use crate::calibration::prior::{sums::field_names, PriorShape, ShapeSums};
use crate::config::ConfigError;
use crate::secret::Secret;

/// The Redis store; connects on first use and reconnects by itself.
pub struct RedisStore {
    client: redis::Client,
    prefix: String,
    conn: Mutex<Option<ConnectionManager>>,
}

impl RedisStore {
    pub(super) fn open(url: &Secret, prefix: &str) -> Result<Self, ConfigError> {
        let client = crate::stores::redis::client(url)?;
        Ok(RedisStore {
            client,
            prefix: prefix.to_string(),
            conn: Mutex::new(None),
        })
    }

    fn key(&self, model: &str, rest: &str) -> String {
        format!("{}:prior:{{{model}}}:{rest}", self.prefix)
    }

    async fn conn(&self) -> Result<ConnectionManager, String> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let second = Duration::from_secs(1);
        let config = crate::stores::redis::manager_config(second, second, 1);
        let conn = ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map_err(|e| e.category().to_string())?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Sets aside what cannot be served, adds `added`, then reads every shape back.
    pub(super) async fn exchange(&self, model: &str, added: &Sums) -> Result<Exchanged, String> {
        let mut conn = self.conn().await?;
        // A field that is not a number would fail the whole write below, and one a write
        // cannot add to (`HINCRBYFLOAT` refuses NaN) would fail it on every exchange: the
        // store is checked, and its garbage moved away, first.
        let (_, set_aside) = self.read(&mut conn, model).await?;
        if !added.is_empty() {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for (shape, sums) in added {
                let key = self.key(model, &shape.to_string());
                for (field, value) in sums.fields().into_iter().filter(|(_, v)| *v != 0.0) {
                    pipe.cmd("HINCRBYFLOAT")
                        .arg(&key)
                        .arg(field)
                        .arg(value)
                        .ignore();
                }
                pipe.cmd("SADD")
                    .arg(self.key(model, "shapes"))
                    .arg(shape.to_string())
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(failed)?;
        }
        let (sums, mut late) = self.read(&mut conn, model).await?;
        late.extend(set_aside);
        Ok(Exchanged {
            sums,
            set_aside: late,
        })
    }

    /// Every shape the index names, read and checked; a shape whose sums cannot be
    /// served is renamed to `…:SHAPE:unreadable` (kept for a look, never read again).
    async fn read(
        &self,
        conn: &mut ConnectionManager,
        model: &str,
    ) -> Result<(Sums, Vec<SetAside>), String> {
        let labels: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.key(model, "shapes"))
            .query_async(conn)
            .await
            .map_err(failed)?;
        let shapes: Vec<PriorShape> = labels.iter().filter_map(|l| PriorShape::parse(l)).collect();
        let mut pipe = redis::pipe();
        for shape in &shapes {
            pipe.cmd("HMGET")
                .arg(self.key(model, &shape.to_string()))
                .arg(field_names(shape.options));
        }
        let rows: Vec<Vec<Option<String>>> = pipe.query_async(conn).await.map_err(failed)?;
        let (mut sums, mut set_aside) = (Vec::new(), Vec::new());
        for (shape, row) in shapes.into_iter().zip(rows) {
            match checked(&shape, &row) {
                Ok(s) => sums.push((shape, s)),
                Err(reason) => {
                    let key = self.key(model, &shape.to_string());
                    let aside = format!("{key}:unreadable");
                    redis::cmd("RENAME")
                        .arg(&key)
                        .arg(&aside)
                        .query_async::<()>(conn)
                        .await
                        .map_err(failed)?;
                    set_aside.push(SetAside {
                        reason,
                        what: format!("{shape} (now {aside})"),
                    });
                }
            }
        }
        Ok((sums, set_aside))
    }
}

fn failed(e: redis::RedisError) -> String {
    e.category().to_string()
}

/// One shape's fields as Redis holds them (a missing field is 0), when they are finite
/// numbers ([`NOT_A_NUMBER`] otherwise) making sums samples could make ([`IMPLAUSIBLE`]).
fn checked(shape: &PriorShape, row: &[Option<String>]) -> Result<ShapeSums, &'static str> {
    let values: Option<Vec<f64>> = row
        .iter()
        .map(|v| match v {
            None => Some(0.0),
            Some(text) => text.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        })
        .collect();
    let values = values.ok_or(NOT_A_NUMBER)?;
    ShapeSums::from_values(shape.options, &values).ok_or(IMPLAUSIBLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_holding_what_samples_cannot_make_is_refused_by_reason() {
        let shape = PriorShape::parse("noul/2/accuracy").expect("a shape");
        let mut sums = ShapeSums::new(2);
        sums.stats
            .observe(&[(0, vec![1.0, -1.0]), (1, vec![0.0, 0.0])]);
        let row: Vec<Option<String>> = sums
            .fields()
            .iter()
            .map(|(_, v)| (*v != 0.0).then(|| v.to_string()))
            .collect();
        assert_eq!(checked(&shape, &row), Ok(sums.clone()));
        let with = |at: usize, text: &str| {
            let mut r = row.clone();
            r[at] = Some(text.to_string());
            checked(&shape, &r)
        };
        for text in ["nan", "NaN", "inf", "-inf", "abc", ""] {
            assert_eq!(with(0, text), Err(NOT_A_NUMBER), "{text}");
        }
        // `rhs:0` and `rhs:1` of a +/-13,158 prior from one sample.
        assert_eq!(with(7, "13158"), Err(IMPLAUSIBLE));
        assert_eq!(with(0, "-5"), Err(IMPLAUSIBLE), "a negative count");
        assert_eq!(
            with(12, "1e300"),
            Err(IMPLAUSIBLE),
            "a gain no question makes"
        );
        let names = field_names(2);
        let at = |name: &str| names.iter().position(|n| n == name).expect(name);
        assert_eq!(
            with(at("agree:3"), "5"),
            Err(IMPLAUSIBLE),
            "agreeing, unscored"
        );
        assert_eq!(with(at("reads"), "5"), Err(IMPLAUSIBLE), "reads, unscored");
        let mut old = row.clone();
        old.truncate(names.len() - crate::calibration::prior::sums::LATER_FIELDS);
        old.resize(names.len(), None);
        assert_eq!(checked(&shape, &old), Ok(sums), "a hash from before: 0");
    }
}
