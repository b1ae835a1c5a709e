//! A `redb` database file under `--state-dir`, as both the limits (`limits.redb`, held
//! open) and the prior (`prior.redb`, opened per exchange) use one: the directory is
//! created when missing, then the file is opened or created (`quota/embedded.rs` says why
//! `redb`).

use std::path::Path;

use redb::Database;

/// Why a database file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Its directory could not be created.
    #[error("{0}")]
    Directory(std::io::Error),
    /// The database refused the file (held by another process, not a database, …).
    #[error("{0}")]
    Database(#[from] redb::DatabaseError),
}

/// Opens (or creates) the database at `path`, creating its directory when missing.
pub fn open(path: &Path) -> Result<Database, OpenError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(OpenError::Directory)?;
    }
    Ok(Database::create(path)?)
}
