//! The priors in the Redis of `--redis-url`, shared by replicas.
//!
//! One hash per (model, shape), `PREFIX:prior:{MODEL}:SHAPE`, one field per sum
//! ([`field_names`]), and a set `PREFIX:prior:{MODEL}:shapes` naming the shapes (so a
//! replica learns shapes only others have seen). An exchange is two round trips: a
//! `MULTI` of one `HINCRBYFLOAT` per non-zero sum and an `SADD` per shape (a replica's
//! delta lands whole or not at all), then `SMEMBERS` and one `HMGET` per shape. The braces
//! keep a model's keys in one cluster slot. No expiry: the estimate is meant to outlive
//! restarts. Its own connection (the `redis` crate's manager, as the limits use it): the
//! exchange runs in the background, never on a request's path.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;

use super::Sums;
use crate::calibration::prior::{sums::field_names, PriorShape, ShapeSums};
use crate::config::ConfigError;
use crate::secret::Secret;

/// The Redis store; connects on first use and reconnects by itself.
pub struct SharedStore {
    client: redis::Client,
    prefix: String,
    conn: Mutex<Option<ConnectionManager>>,
}

impl SharedStore {
    pub(super) fn open(url: &Secret, prefix: &str) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url.expose()).map_err(|e| {
            ConfigError::Invalid(format!(
                "--redis-url is not a Redis URL (redis://[user:password@]host:port[/db]): {}",
                e.category()
            ))
        })?;
        Ok(SharedStore {
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
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(1))
            .set_response_timeout(Duration::from_secs(1))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map_err(|e| e.category().to_string())?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    pub(super) async fn exchange(&self, model: &str, added: &Sums) -> Result<Sums, String> {
        let mut conn = self.conn().await?;
        let failed = |e: redis::RedisError| e.category().to_string();
        let index = self.key(model, "shapes");
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
                pipe.cmd("SADD").arg(&index).arg(shape.to_string()).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(failed)?;
        }
        let labels: Vec<String> = redis::cmd("SMEMBERS")
            .arg(&index)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        let shapes: Vec<PriorShape> = labels.iter().filter_map(|l| PriorShape::parse(l)).collect();
        let mut pipe = redis::pipe();
        for shape in &shapes {
            pipe.cmd("HMGET")
                .arg(self.key(model, &shape.to_string()))
                .arg(field_names(shape.options));
        }
        let rows: Vec<Vec<Option<f64>>> = pipe.query_async(&mut conn).await.map_err(failed)?;
        Ok(shapes
            .into_iter()
            .zip(rows)
            .filter_map(|(shape, row)| {
                let values: Vec<f64> = row.into_iter().map(|v| v.unwrap_or(0.0)).collect();
                ShapeSums::from_values(shape.options, &values).map(|s| (shape, s))
            })
            .collect())
    }
}
