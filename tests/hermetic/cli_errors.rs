//! What the binary says when it cannot start: each error names what to change.

/// Runs `serve` on `listen` in front of a backend that is never reached, with a ledger of
/// its own (the default one is under the user's state directory) and `extra` flags; it must
/// fail to start. Returns its stderr.
fn serve_fails(listen: &str, extra: &[&str]) -> String {
    let ledger = std::env::temp_dir()
        .join(format!(
            "systemone-cli-errors-{}",
            uuid::Uuid::new_v4().simple()
        ))
        .join("ledger.sqlite");
    let out = crate::support::binary()
        .args(["serve", "--listen", listen, "--token-table", "golden-fake"])
        .args(["--backend-url", "http://127.0.0.1:9/v1"])
        .args(["--token-check-interval-secs", "0"])
        .args(extra)
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    stderr
}

/// `serve` on an address already taken exits with an error that names the address and the
/// flag, rather than a bare "Address already in use".
#[test]
fn serve_on_a_taken_address_names_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let address = taken.local_addr().expect("address").to_string();
    let stderr = serve_fails(&address, &[]);
    assert!(
        stderr.contains(&format!("cannot listen on {address} (--listen)")),
        "{stderr}"
    );
}

/// A commit delay as long as the ledger's timeout would make every batched record miss its
/// commit: `serve` refuses to start and names both flags and their values.
#[test]
fn a_commit_delay_not_below_the_ledger_timeout_is_refused() {
    let stderr = serve_fails(
        "127.0.0.1:0",
        &[
            "--ledger-timeout-ms",
            "5",
            "--ledger-commit-delay-us",
            "5000",
        ],
    );
    assert!(
        stderr.contains("--ledger-commit-delay-us 5000 is not below --ledger-timeout-ms 5"),
        "{stderr}"
    );
}
