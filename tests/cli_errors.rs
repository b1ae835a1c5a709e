//! What the binary says when it cannot start: each error names what to change.

/// `serve` on an address already taken exits with an error that names the address and the
/// flag, rather than a bare "Address already in use".
#[test]
fn serve_on_a_taken_address_names_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let address = taken.local_addr().expect("address").to_string();
    let ledger = std::env::temp_dir()
        .join(format!("systemone-cli-errors-{}", std::process::id()))
        .join("ledger.sqlite");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args([
            "serve",
            "--listen",
            &address,
            "--token-table",
            "golden-fake",
        ])
        .args([
            "--backend-url",
            "http://127.0.0.1:9/v1",
            "--token-check-interval-secs",
            "0",
        ])
        // A ledger of its own: the default one is under the user's state directory.
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {address} (--listen)")),
        "{stderr}"
    );
}

/// A commit delay as long as the ledger's timeout would make every batched record miss its
/// commit: `serve` refuses to start and names both flags and their values.
#[test]
fn a_commit_delay_not_below_the_ledger_timeout_is_refused() {
    let ledger = std::env::temp_dir()
        .join(format!("systemone-cli-delay-{}", std::process::id()))
        .join("ledger.sqlite");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_systemone"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token-table",
            "golden-fake",
        ])
        .args(["--backend-url", "http://127.0.0.1:9/v1"])
        .args(["--token-check-interval-secs", "0"])
        .args([
            "--ledger-timeout-ms",
            "5",
            "--ledger-commit-delay-us",
            "5000",
        ])
        .arg("--ledger")
        .arg(format!("sqlite:{}", ledger.display()))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--ledger-commit-delay-us 5000 is not below --ledger-timeout-ms 5"),
        "{stderr}"
    );
}
