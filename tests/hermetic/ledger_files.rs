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
//!   restart), requests are answered and recorded again and `/readyz` is 200.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::ledger::{Backend, LedgerDb};
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
