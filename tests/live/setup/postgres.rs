//! A PostgreSQL of a test's own, to stop and restart under load: a cluster made by
//! `scripts/start-postgres.sh` in a temp dir on a free port.

/// A PostgreSQL of a test's own (`scripts/start-postgres.sh`), to stop and restart; killed
/// and its cluster removed when dropped.
pub struct OwnPostgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub url: String,
    pid: u32,
    dir: String,
    port: String,
}

impl OwnPostgres {
    /// A new cluster on a free port.
    pub fn start() -> Self {
        // Set by scripts/start-postgres.sh, which installs the PostgreSQL this runs.
        crate::support::ledger::postgres_url();
        let vars = start_script(&[]);
        let url = vars["POSTGRES_URL"].clone();
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.split('/').next())
            .expect("a port")
            .to_owned();
        OwnPostgres {
            pid: vars["POSTGRES_PID"].parse().expect("a pid"),
            dir: vars["POSTGRES_DIR"].clone(),
            url,
            port,
        }
    }

    /// Stops the server (fast shutdown) and waits until it has exited.
    pub fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.pid.to_string()])
            .status();
        for _ in 0..200 {
            if !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("postgres {} did not stop within 10 s", self.pid);
    }

    /// Starts the same cluster again on the same port.
    pub fn restart(&mut self) {
        let vars = start_script(&[&self.dir, &self.port]);
        self.pid = vars["POSTGRES_PID"].parse().expect("a pid");
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `scripts/start-postgres.sh args`; returns the variables it printed.
fn start_script(args: &[&str]) -> std::collections::HashMap<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/start-postgres.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect("the script runs");
    assert!(
        out.status.success(),
        "start-postgres: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
