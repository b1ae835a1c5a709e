//! The SQLite ledger's files replaced or removed while the service runs. SQLite writes on
//! through the descriptors it holds, into files no one reads again, so the service checks
//! the files at the path by identity before and after each commit:
//!
//! * an operator restores the files from a copy (the originals deleted, the copy put
//!   back): every answer after the restore is on record in the restored files, as a new
//!   connection reads them, and each was counted committed;
//! * the ledger's directory is removed: under `fail_closed` requests get 503
//!   `system_one_ledger_unavailable` and `/readyz` says the ledger is unavailable (503);
//!   once the directory is made again the ledger opens a new file there by itself (no
//!   restart), requests are answered and recorded again and `/readyz` is 200;
//! * the live file overwritten in place (same inode, as `cp` over it does) with garbage or
//!   with another ledger: the service notices at its next write, refuses under
//!   `fail_closed` and says `integrity: corrupt` in `/readyz` (503);
//! * the same found by a read (a listing) before any write: the read gets 503, `/readyz`
//!   says `integrity: corrupt` at once, and `fail_closed` refuses the next answer;
//! * `systemone ledger backup`, run while the service records, writes a copy that passes
//!   `PRAGMA integrity_check` and holds every record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::ledger::{run_binary, Backend, LedgerDb};
use crate::support::ledger_suite::{request_id, service, three_questions};
use crate::support::{ask, assert_error, get, metrics, Reply, Service};

/// The ledger file's companions SQLite keeps beside it in WAL mode, and itself.
fn ledger_files(db: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
        .collect()
}

/// How many of `ids` are on record in the files now at the ledger's path.
async fn on_record(db: &LedgerDb, ids: &[String]) -> usize {
    let mut conn = db.connect().await;
    let mut found = 0;
    for id in ids {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM decisions WHERE request_id = $1")
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .expect("reads");
        found += usize::try_from(n).expect("a count");
    }
    found
}

/// Asks until an answer is 200 (bounded: the ledger opens its files again within its
/// probe interval); returns it.
async fn answered_again(service: &Service) -> Reply {
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for _ in 0..50 {
        let reply = ask(service, &body).await;
        if reply.status == 200 {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no answer within 5 s of the ledger's directory coming back");
}

/// `/readyz` and its `ledger` line.
async fn readyz_ledger(service: &Service) -> (u16, serde_json::Value) {
    let reply = get(service, "/readyz").await;
    (reply.status, reply.body["ledger"].clone())
}

#[tokio::test]
async fn answers_after_the_files_are_restored_under_the_service_are_on_record() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) = service(&db, &["--ledger-policy", "fail_open"]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    assert_eq!(ask(&service, &body).await.status, 200);
    let file = db.file.clone().expect("an SQLite file");
    for path in ledger_files(&file) {
        let mut copy = path.clone().into_os_string();
        copy.push(".bak");
        std::fs::copy(&path, &copy).expect("copy");
        std::fs::remove_file(&path).expect("delete");
        std::fs::copy(&copy, &path).expect("restore");
    }
    let mut ids = Vec::new();
    for _ in 0..5 {
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        ids.push(request_id(&reply));
    }
    assert_eq!(
        on_record(&db, &ids).await,
        ids.len(),
        "answers after the restore"
    );
    let counted = "systemone_ledger_records_total{result=\"committed\",store=\"sqlite\"} 6";
    let metrics = metrics(&service).await;
    assert!(metrics.contains(counted), "{counted} in {metrics}");
    assert!(!metrics.contains("result=\"fail_open\""), "{metrics}");
}

#[tokio::test]
async fn a_removed_directory_refuses_until_it_is_back_then_records_again() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = [
        "--ledger-policy",
        "fail_closed",
        "--ledger-timeout-ms",
        "2000",
    ];
    let (_fake, service) = service(&db, &flags).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    assert_eq!(ask(&service, &body).await.status, 200);
    assert_eq!(readyz_ledger(&service).await.1["available"], true);
    let file = db.file.clone().expect("an SQLite file");
    let dir = file.parent().expect("a directory").to_path_buf();
    std::fs::remove_dir_all(&dir).expect("remove the directory");

    let reply = ask(&service, &body).await;
    assert_error(&reply, 503, "system_one_ledger_unavailable", "unavailable");
    let (status, ledger) = readyz_ledger(&service).await;
    assert_eq!(status, 503, "{ledger}");
    assert_eq!(ledger["available"], false, "{ledger}");
    assert_eq!(ledger["ready"], false, "{ledger}");

    std::fs::create_dir_all(&dir).expect("the directory is back");
    let reply = answered_again(&service).await;
    assert_eq!(on_record(&db, &[request_id(&reply)]).await, 1);
    let (status, ledger) = readyz_ledger(&service).await;
    assert_eq!(status, 200, "{ledger}");
    assert_eq!(ledger["available"], true, "{ledger}");
}

/// Overwrites the file at `path` in place, keeping its inode, with `bytes`.
fn overwrite_in_place(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(path).expect("the file").ino();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .expect("opens for writing");
    file.write_all(bytes).expect("writes");
    file.sync_all().expect("syncs");
    assert_eq!(std::fs::metadata(path).expect("the file").ino(), inode);
}

/// A copy over the live file, keeping its inode, is noticed at the next write: under
/// `fail_closed` the request is refused, and `/readyz` is 503 with `integrity: corrupt`;
/// with garbage as with another (sound) ledger, whose pages the service's WAL does not fit.
#[tokio::test]
async fn a_copy_over_the_live_file_is_noticed_and_refused_under_fail_closed() {
    let other = LedgerDb::new(Backend::Sqlite).await;
    let (_other_fake, other_service) = service(&other, &[]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    assert_eq!(ask(&other_service, &body).await.status, 200);
    let backup = other.file.clone().expect("a file").with_extension("copy");
    run_binary(&[
        "ledger",
        "backup",
        "--ledger",
        &format!("sqlite:{}", other.file.clone().expect("a file").display()),
        "--to",
        &backup.display().to_string(),
    ]);
    let another_ledger = std::fs::read(&backup).expect("the copy");
    for bytes in [vec![0x5a_u8; 64 * 1024], another_ledger] {
        let db = LedgerDb::new(Backend::Sqlite).await;
        let flags = [
            "--ledger-policy",
            "fail_closed",
            "--ledger-timeout-ms",
            "2000",
        ];
        let (_fake, service) = service(&db, &flags).await;
        for _ in 0..3 {
            assert_eq!(ask(&service, &body).await.status, 200);
        }
        assert_eq!(readyz_ledger(&service).await.1["integrity"], "ok");
        overwrite_in_place(&db.file.clone().expect("a file"), &bytes);
        let reply = ask(&service, &body).await;
        assert_error(&reply, 503, "system_one_ledger_unavailable", "unavailable");
        let (status, ledger) = readyz_ledger(&service).await;
        assert_eq!(status, 503, "{ledger}");
        assert_eq!(ledger["integrity"], "corrupt", "{ledger}");
        assert_eq!(ledger["ready"], false, "{ledger}");
        let again = ask(&service, &body).await;
        assert_error(&again, 503, "system_one_ledger_unavailable", "unavailable");
    }
}

/// A corrupt file found by a read (a listing, before any write notices it) is taken for
/// corrupt as a write would take it: the listing is 503, `/readyz` says `integrity:
/// corrupt`, and under `fail_closed` the next answer is refused.
#[tokio::test]
async fn a_corrupt_file_found_by_a_listing_is_flagged_before_any_write() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = ["--ledger-policy", "fail_closed"];
    let (_fake, service) = service(&db, &flags).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    for _ in 0..3 {
        assert_eq!(ask(&service, &body).await.status, 200);
    }
    // Every page into the file and the WAL emptied (as SQLite's own checkpoints do), then
    // every page after the header overwritten in place: the records are only in the file.
    let mut conn = db.connect().await;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .expect("checkpoints");
    drop(conn);
    let path = db.file.clone().expect("a file");
    let mut bytes = std::fs::read(&path).expect("the file");
    bytes[4096..].fill(0x5a);
    overwrite_in_place(&path, &bytes);
    let listing = get(&service, "/v1/ledger/decisions").await;
    assert_error(
        &listing,
        503,
        "system_one_ledger_unavailable",
        "unavailable",
    );
    let (status, ledger) = readyz_ledger(&service).await;
    assert_eq!(status, 503, "{ledger}");
    assert_eq!(ledger["integrity"], "corrupt", "{ledger}");
    let reply = ask(&service, &body).await;
    assert_error(&reply, 503, "system_one_ledger_unavailable", "unavailable");
}

/// A `chmod` of the live file changes no byte (only its `ctime`): it is not taken for a copy
/// over the file, and answers keep being recorded.
#[tokio::test]
async fn a_chmod_of_the_live_file_is_not_taken_for_a_copy() {
    use std::os::unix::fs::PermissionsExt;
    let db = LedgerDb::new(Backend::Sqlite).await;
    let flags = ["--ledger-policy", "fail_closed"];
    let (_fake, service) = service(&db, &flags).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    assert_eq!(ask(&service, &body).await.status, 200);
    let file = db.file.clone().expect("a file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    for _ in 0..3 {
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let (status, ledger) = readyz_ledger(&service).await;
    assert_eq!(
        (status, &ledger["integrity"]),
        (200, &"ok".into()),
        "{ledger}"
    );
}

/// `systemone ledger backup` run beside the live service writes a new file that passes
/// `PRAGMA integrity_check` and holds every record answered before it; it never writes
/// over an existing file.
#[tokio::test]
async fn a_backup_taken_while_the_service_runs_is_sound_and_whole() {
    let db = LedgerDb::new(Backend::Sqlite).await;
    let (_fake, service) = service(&db, &[]).await;
    let body = three_questions("charged twice", "team", "bug", "Which team?");
    let mut ids = Vec::new();
    for _ in 0..20 {
        let reply = ask(&service, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        ids.push(request_id(&reply));
    }
    let file = db.file.clone().expect("an SQLite file");
    let copy = file.with_extension("backup");
    let ledger = format!("sqlite:{}", file.display());
    let to = copy.display().to_string();
    let args = ["ledger", "backup", "--ledger", &ledger, "--to", &to];
    let said = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        move || run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("the backup ran");
    assert!(said.starts_with("20 records backed up"), "{said}");
    let backup = LedgerDb {
        backend: Backend::Sqlite,
        target: format!("sqlite:{to}"),
        file: Some(copy.clone()),
    };
    let mut conn = backup.connect().await;
    let checked: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .expect("checks");
    assert_eq!(checked, "ok");
    assert_eq!(on_record(&backup, &ids).await, ids.len());
    let again = crate::support::binary().args(args).output().expect("runs");
    assert!(
        !again.status.success(),
        "a second backup wrote over the first"
    );
    assert_eq!(
        ask(&service, &body).await.status,
        200,
        "the service records on"
    );
}
