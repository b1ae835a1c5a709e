//! The priors in `prior.redb` under `--state-dir`, for a single instance.
//!
//! `redb` as the limits' embedded store uses it (`quota/embedded.rs` says why), in a file
//! of its own: the limits' file is held open by their store, and the priors are written
//! a few times a minute, so the database is opened for each exchange and closed after it
//! (a restarted service in the same process, or a second one on the directory, then finds
//! the file free between exchanges rather than locked for the process's life).

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use redb::{ReadableTable, TableDefinition};

use super::{Exchanged, SetAside, Sums, IMPLAUSIBLE, UNREADABLE};
use crate::calibration::prior::sums::{field_names, LATER_FIELDS};
use crate::calibration::prior::{PriorShape, ShapeSums};
use crate::stores::redb::OpenError;

/// (model, shape label) → the sums, `f64` little-endian in [`field_names`]' order.
const PRIORS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("priors");

/// The file's name under the state directory.
pub const FILE_NAME: &str = "prior.redb";

/// The file, opened per exchange.
#[derive(Debug)]
pub struct EmbeddedStore {
    path: PathBuf,
}

impl EmbeddedStore {
    pub(super) fn new(dir: &Path) -> Self {
        EmbeddedStore {
            path: dir.join(FILE_NAME),
        }
    }

    /// Adds and reads back in one write transaction, on the blocking pool.
    pub(super) async fn exchange(&self, model: &str, added: &Sums) -> Result<Exchanged, String> {
        let (path, model, added) = (self.path.clone(), model.to_string(), added.clone());
        tokio::task::spawn_blocking(move || guarded(&path, &model, &added))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// Why an exchange with the file failed.
#[derive(Debug)]
enum Failure {
    /// The file is not a database this store can read (corrupt, truncated, another
    /// format): it is moved aside.
    Unreadable(String),
    /// Anything else (the file held by another process, a directory that cannot be
    /// written): the next exchange tries again.
    Other(String),
}

impl<E: Into<redb::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        let e: redb::Error = e.into();
        let unreadable = match &e {
            redb::Error::Corrupted(_)
            | redb::Error::UpgradeRequired(_)
            | redb::Error::RepairAborted
            | redb::Error::TableTypeMismatch { .. }
            | redb::Error::TypeDefinitionChanged { .. }
            | redb::Error::TableIsMultimap(_) => true,
            redb::Error::Io(io) => matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
            ),
            _ => false,
        };
        match unreadable {
            true => Failure::Unreadable(e.to_string()),
            false => Failure::Other(e.to_string()),
        }
    }
}

/// [`exchange`], with a file that cannot be read (an error saying so, or a panic in the
/// database while reading it) renamed to `prior.redb.unreadable-<unix seconds>` and the
/// exchange made again on a new file: the priors learn afresh rather than never again.
fn guarded(path: &Path, model: &str, added: &Sums) -> Result<Exchanged, String> {
    let first = std::panic::catch_unwind(AssertUnwindSafe(|| exchange(path, model, added)));
    let why = match first {
        Ok(Ok(done)) => return Ok(done),
        Ok(Err(Failure::Other(e))) => return Err(e),
        Ok(Err(Failure::Unreadable(e))) => e,
        Err(_) => "the database panicked reading it".to_string(),
    };
    let aside = set_aside(path)?;
    tracing::error!(file = %path.display(), moved_to = %aside.display(), reason = %why, "the position prior's file cannot be read: moved aside, the priors learn afresh");
    let mut done = match exchange(path, model, added) {
        Ok(done) => done,
        Err(Failure::Unreadable(e) | Failure::Other(e)) => return Err(e),
    };
    let name = aside.file_name().unwrap_or_default().to_string_lossy();
    done.set_aside.push(SetAside {
        reason: UNREADABLE,
        what: format!("{FILE_NAME} (now {name})"),
    });
    Ok(done)
}

/// Renames the file out of the way; its new path.
fn set_aside(path: &Path) -> Result<PathBuf, String> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = path.with_file_name(format!("{FILE_NAME}.unreadable-{secs}"));
    std::fs::rename(path, &aside).map_err(|e| format!("cannot move it aside: {e}"))?;
    Ok(aside)
}

fn exchange(path: &Path, model: &str, added: &Sums) -> Result<Exchanged, Failure> {
    let db = match crate::stores::redb::open(path) {
        Ok(db) => db,
        Err(OpenError::Directory(e)) => return Err(Failure::Other(e.to_string())),
        Err(OpenError::Database(e)) => return Err(e.into()),
    };
    let txn = db.begin_write()?;
    let done = {
        let mut table = txn.open_table(PRIORS)?;
        let set_aside = drop_unreadable(&mut table, model)?;
        add(&mut table, model, added)?;
        Exchanged {
            sums: read(&table, model)?.0,
            set_aside,
        }
    };
    txn.commit()?;
    Ok(done)
}

type Table<'t> = redb::Table<'t, (&'static str, &'static str), &'static [u8]>;

/// Removes `model`'s rows that cannot be served (their sums are not finite or beyond
/// what samples can make); what they were.
fn drop_unreadable(table: &mut Table<'_>, model: &str) -> Result<Vec<SetAside>, Failure> {
    let (_, bad) = read(table, model)?;
    for label in &bad {
        table.remove((model, label.as_str()))?;
    }
    Ok(bad
        .into_iter()
        .map(|label| SetAside {
            reason: IMPLAUSIBLE,
            what: format!("{label} (removed)"),
        })
        .collect())
}

/// Adds each shape's sums to its row.
fn add(table: &mut Table<'_>, model: &str, added: &Sums) -> Result<(), Failure> {
    for (shape, sums) in added {
        let label = shape.to_string();
        let mut total = table
            .get((model, label.as_str()))?
            .and_then(|v| decode(shape, v.value()))
            .unwrap_or_else(|| ShapeSums::new(shape.options));
        total.merge(sums);
        table.insert((model, label.as_str()), encode(&total).as_slice())?;
    }
    Ok(())
}

/// `model`'s readable rows, and the labels of the shapes whose rows are not.
fn read(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    model: &str,
) -> Result<(Sums, Vec<String>), Failure> {
    let (mut sums, mut bad) = (Vec::new(), Vec::new());
    for row in table.range((model, "")..)? {
        let (key, value) = row?;
        let (owner, label) = key.value();
        if owner != model {
            break;
        }
        let Some(shape) = PriorShape::parse(label) else {
            continue;
        };
        match decode(&shape, value.value()) {
            Some(s) => sums.push((shape, s)),
            None => bad.push(label.to_string()),
        }
    }
    Ok((sums, bad))
}

fn encode(sums: &ShapeSums) -> Vec<u8> {
    sums.fields()
        .iter()
        .flat_map(|(_, v)| v.to_le_bytes())
        .collect()
}

/// A row's sums; a row written before the [`LATER_FIELDS`] were kept reads them as 0.
fn decode(shape: &PriorShape, bytes: &[u8]) -> Option<ShapeSums> {
    let mut values: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let fields = field_names(shape.options).len();
    if values.len() == fields - LATER_FIELDS {
        values.resize(fields, 0.0);
    }
    (values.len() == fields && bytes.len() % 8 == 0)
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

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("systemone-prior-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join(FILE_NAME)
    }

    #[test]
    fn a_file_that_cannot_be_read_is_moved_aside_and_learned_afresh() {
        let path = temp_path("unreadable");
        exchange(&path, "a", &vec![(shape(), learned(1.0))]).expect("written");
        let full = std::fs::read(&path).expect("the file");
        let random: Vec<u8> = (0..full.len()).map(|i| (i * 7919 % 251) as u8).collect();
        // Half a file makes the database panic on open; garbage makes it say so.
        for bytes in [
            full[..full.len() / 2].to_vec(),
            random,
            full[..100].to_vec(),
        ] {
            std::fs::write(&path, &bytes).expect("written");
            let done = guarded(&path, "a", &vec![(shape(), learned(2.0))]).expect("afresh");
            assert_eq!(done.sums, vec![(shape(), learned(2.0))], "nothing old");
            assert_eq!(done.set_aside.len(), 1);
            assert_eq!(done.set_aside[0].reason, UNREADABLE);
            let dir = path.parent().expect("a dir");
            let aside = std::fs::read_dir(dir)
                .expect("the dir")
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().contains(".unreadable-"))
                .count();
            assert!(aside >= 1, "moved aside, not deleted");
            let again = guarded(&path, "a", &Vec::new()).expect("read");
            assert!(again.set_aside.is_empty(), "the new file reads");
            let _ = std::fs::remove_file(&path);
        }
        let _ = std::fs::remove_dir_all(path.parent().expect("a dir"));
    }

    #[test]
    fn rows_beyond_what_samples_make_are_removed_not_served() {
        let path = temp_path("implausible");
        exchange(&path, "a", &vec![(shape(), learned(1.0))]).expect("written");
        let mut values: Vec<f64> = learned(1.0).fields().iter().map(|(_, v)| *v).collect();
        values[3 + 4] = 13_158.0; // `rhs:0`, one sample
        values[3 + 5] = -13_158.0;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let nan: Vec<u8> = [f64::NAN; 40]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for bad in [bytes, nan, vec![1, 2, 3]] {
            {
                let db = redb::Database::create(&path).expect("open");
                let txn = db.begin_write().expect("txn");
                txn.open_table(PRIORS)
                    .expect("table")
                    .insert(("a", "noul/2/accuracy"), bad.as_slice())
                    .expect("insert");
                txn.commit().expect("commit");
            }
            let done = guarded(&path, "a", &Vec::new()).expect("read");
            assert_eq!(done.sums, Vec::new(), "not served");
            assert_eq!(done.set_aside[0].reason, IMPLAUSIBLE);
            let again = guarded(&path, "a", &vec![(shape(), learned(1.0))]).expect("read");
            assert_eq!(again.sums, vec![(shape(), learned(1.0))], "learned afresh");
            assert!(again.set_aside.is_empty());
        }
        let _ = std::fs::remove_dir_all(path.parent().expect("a dir"));
    }

    #[test]
    fn a_row_written_before_the_agreement_was_kept_reads_it_as_zero() {
        let mut sums = learned(1.0);
        sums.fit
            .score(&[(0, vec![1.0, -1.0]), (1, vec![0.0, 0.0])], &[0.0, 0.0]);
        let bytes = encode(&sums);
        let old = &bytes[..bytes.len() - 8 * LATER_FIELDS];
        let read = decode(&shape(), old).expect("an old row is read");
        assert_eq!((read.fit.scored, read.fit.reads), (1, 0));
        assert_eq!(read.stats, sums.stats);
        assert_eq!(decode(&shape(), &bytes), Some(sums));
        assert_eq!(decode(&shape(), &old[8..]), None, "any other length is not");
    }

    #[test]
    fn the_file_adds_what_each_exchange_brings_and_keeps_models_apart() {
        let dir = std::env::temp_dir().join(format!("systemone-prior-{}", std::process::id()));
        let path = dir.join(FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let first = exchange(&path, "a", &vec![(shape(), learned(1.0))])
            .expect("written")
            .sums;
        assert_eq!(first, vec![(shape(), learned(1.0))]);
        exchange(&path, "b", &vec![(shape(), learned(2.0))]).expect("written");
        let again = exchange(&path, "a", &vec![(shape(), learned(1.0))])
            .expect("written")
            .sums;
        let mut twice = learned(1.0);
        twice.merge(&learned(1.0));
        assert_eq!(again, vec![(shape(), twice)], "model b's sums are b's");
        let read = exchange(&path, "b", &Vec::new()).expect("read").sums;
        assert_eq!(read, vec![(shape(), learned(2.0))]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
