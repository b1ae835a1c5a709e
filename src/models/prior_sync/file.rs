//! The priors in `prior.redb` under `--state-dir`, for a single instance.
//!
//! `redb` as the limits' embedded store uses it (`quota/embedded.rs` says why), in a file
//! of its own: the limits' file is held open by their store, and the priors are written
//! a few times a minute, so the database is opened for each exchange and closed after it
//! (a restarted service in the same process, or a second one on the directory, then finds
//! the file free between exchanges rather than locked for the process's life).

use std::path::{Path, PathBuf};

use redb::{Database, ReadableTable, TableDefinition};

use super::Sums;
use crate::calibration::prior::{sums::field_names, PriorShape, ShapeSums};

/// (model, shape label) → the sums, `f64` little-endian in [`field_names`]' order.
const PRIORS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("priors");

/// The file's name under the state directory.
pub const FILE_NAME: &str = "prior.redb";

/// The file, opened per exchange.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    pub(super) fn new(dir: &Path) -> Self {
        FileStore {
            path: dir.join(FILE_NAME),
        }
    }

    /// Adds and reads back in one write transaction, on the blocking pool.
    pub(super) async fn exchange(&self, model: &str, added: &Sums) -> Result<Sums, String> {
        let (path, model, added) = (self.path.clone(), model.to_string(), added.clone());
        tokio::task::spawn_blocking(move || exchange(&path, &model, &added))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn exchange(path: &Path, model: &str, added: &Sums) -> Result<Sums, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let db = Database::create(path).map_err(failed)?;
    let txn = db.begin_write().map_err(failed)?;
    let merged = {
        let mut table = txn.open_table(PRIORS).map_err(failed)?;
        for (shape, sums) in added {
            let label = shape.to_string();
            let mut total = table
                .get((model, label.as_str()))
                .map_err(failed)?
                .and_then(|v| decode(shape, v.value()))
                .unwrap_or_else(|| ShapeSums::new(shape.options));
            total.merge(sums);
            table
                .insert((model, label.as_str()), encode(&total).as_slice())
                .map_err(failed)?;
        }
        let mut merged = Vec::new();
        for row in table.range((model, "")..).map_err(failed)? {
            let (key, value) = row.map_err(failed)?;
            let (owner, label) = key.value();
            if owner != model {
                break;
            }
            let shape = PriorShape::parse(label);
            if let Some((shape, sums)) =
                shape.and_then(|s| decode(&s, value.value()).map(|v| (s, v)))
            {
                merged.push((shape, sums));
            }
        }
        merged
    };
    txn.commit().map_err(failed)?;
    Ok(merged)
}

fn encode(sums: &ShapeSums) -> Vec<u8> {
    sums.fields()
        .iter()
        .flat_map(|(_, v)| v.to_le_bytes())
        .collect()
}

fn decode(shape: &PriorShape, bytes: &[u8]) -> Option<ShapeSums> {
    let values: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    (values.len() == field_names(shape.options).len())
        .then(|| ShapeSums::from_values(shape.options, &values))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> PriorShape {
        PriorShape::parse("noul/2/accuracy").expect("a shape")
    }

    fn learned(x: f64) -> ShapeSums {
        let mut sums = ShapeSums::new(2);
        sums.stats
            .observe(&[(0, vec![x, -x]), (1, vec![x - 1.0, 1.0 - x])]);
        sums
    }

    #[test]
    fn the_file_adds_what_each_exchange_brings_and_keeps_models_apart() {
        let dir = std::env::temp_dir().join(format!("systemone-prior-{}", std::process::id()));
        let path = dir.join(FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let first = exchange(&path, "a", &vec![(shape(), learned(1.0))]).expect("written");
        assert_eq!(first, vec![(shape(), learned(1.0))]);
        exchange(&path, "b", &vec![(shape(), learned(2.0))]).expect("written");
        let again = exchange(&path, "a", &vec![(shape(), learned(1.0))]).expect("written");
        let mut twice = learned(1.0);
        twice.merge(&learned(1.0));
        assert_eq!(again, vec![(shape(), twice)], "model b's sums are b's");
        let read = exchange(&path, "b", &Vec::new()).expect("read");
        assert_eq!(read, vec![(shape(), learned(2.0))]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
