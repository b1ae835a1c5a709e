//! The SQLite ledger's files by identity (device and inode): the database and its WAL.
//!
//! A name can come to mean another file while the service runs: an operator restores a
//! backup over the ledger, deletes its directory, or an `sqlite3` command makes a new WAL
//! beside a deleted one. SQLite then writes on through the descriptors it holds, into files
//! no one will read again. The writer takes the files' identity when its connection opens
//! them and compares it with the files at the path before and after each commit: a commit
//! it cannot prove landed in the files at the path is not acknowledged, and the ledger is
//! opened again on the path ([`super::writer`]).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file's device and inode.
type FileId = (u64, u64);

/// When the database file's content last changed and its size: its modification time
/// (`mtime`) moves on every write to it, the writer's own checkpoints included, and not on
/// a `chmod`, `chown` or a new hard link, which change no byte (they move `ctime`, and
/// would read as a copy over the file).
pub(super) type FileStamp = (i64, i64, u64);

/// The database file and its WAL, as found at their paths at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIds {
    db: FileId,
    wal: FileId,
}

/// Where the SQLite ledger lives: its file and the URL that opens it.
#[derive(Debug)]
pub(super) struct SqliteFile {
    /// The database file (its WAL is `<path>-wal`).
    pub(super) path: PathBuf,
    /// The `sqlite://` URL of `path` (creating the file when missing).
    pub(super) url: String,
}

impl SqliteFile {
    /// The ledger file at `path`.
    pub(super) fn new(path: &Path) -> Self {
        // The driver percent-decodes the file name: `%`, `?` and `#` in it are encoded.
        let name = path
            .display()
            .to_string()
            .replace('%', "%25")
            .replace('?', "%3F")
            .replace('#', "%23");
        SqliteFile {
            path: path.to_path_buf(),
            url: format!("sqlite://{name}?mode=rwc"),
        }
    }

    /// The identities of the files now at the database's and the WAL's paths; an error
    /// when either is missing.
    pub(super) fn ids(&self) -> io::Result<FileIds> {
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        Ok(FileIds {
            db: id(&self.path)?,
            wal: id(Path::new(&wal))?,
        })
    }

    /// The database file's modification time and size now.
    pub(super) fn stamp(&self) -> io::Result<FileStamp> {
        let m = std::fs::metadata(&self.path)?;
        Ok((m.mtime(), m.mtime_nsec(), m.size()))
    }

    /// Whether the file's directory (the storage it lives on) is there: the ledger is
    /// opened again (a missing file made anew, as a start would) only then, never by
    /// making the directory, which may be a mount that is not back yet.
    pub(super) fn storage_present(&self) -> io::Result<()> {
        match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) if !dir.is_dir() => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("the ledger's directory {} is missing", dir.display()),
            )),
            _ => Ok(()),
        }
    }
}

fn id(path: &Path) -> io::Result<FileId> {
    std::fs::metadata(path)
        .map(|m| (m.dev(), m.ino()))
        .map_err(|e| io::Error::new(e.kind(), format!("the ledger file {}: {e}", path.display())))
}
