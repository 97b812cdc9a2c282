//! Test support shared by the test suites of several crates.
//!
//! [`PgCluster`] is a throwaway PostgreSQL cluster for one test binary: `initdb` and
//! `pg_ctl` from the machine's PostgreSQL (Debian's `postgresql` package) into a temp
//! dir, listening on a free loopback port with `trust` authentication, stopped and
//! deleted when the test binary exits. Each test takes a database of its own
//! ([`PgCluster::database`]), so tests run in parallel without seeing each other.
//!
//! When PostgreSQL is not installed, [`PgCluster::shared`] returns `None` after printing
//! `skipped: PostgreSQL not installed …` — except under `CI=true`, where that is a
//! failure: CI installs the package (`.ci/run`), so a skip there would hide a broken
//! setup.
//!
//! A test that needs the server on another address too (a runner in a network
//! namespace reaching it over a veth pair) starts a cluster of its own with
//! [`PgCluster::dedicated`]: the same setup, also listening on the given addresses and
//! trusting the given networks, stopped with [`PgCluster::stop`] (or at exit).
//!
//! PostgreSQL refuses to run as root, and CI runs as root: then the cluster belongs to
//! the `postgres` system user the package creates (via `runuser`), and only its
//! directory is handed to that user.

use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running throwaway cluster.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    /// Holds the cluster's data dir and socket dir; removed by the exit guard.
    root: PathBuf,
    port: u16,
    /// The OS user the server runs as when we are root.
    run_as: Option<String>,
}

/// Why no cluster could be started.
#[derive(Debug)]
pub struct Unavailable(pub String);

static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
static DATABASES: AtomicUsize = AtomicUsize::new(0);

impl PgCluster {
    /// The cluster of this test binary, started on first use; `None` (with a printed
    /// skip line) when PostgreSQL is not installed and this is not CI.
    ///
    /// # Panics
    /// Under `CI=true` when PostgreSQL is missing or does not start, and anywhere when
    /// it is installed but does not start (a broken setup must not pass as a skip).
    pub fn shared() -> Option<&'static PgCluster> {
        let started = SHARED.get_or_init(|| match find_bin() {
            None => Err("PostgreSQL not installed (apt-get install postgresql)".to_owned()),
            Some(bin) => PgCluster::start(&bin).map_err(|Unavailable(why)| {
                // Installed but broken: always a failure.
                panic!("cannot start a PostgreSQL test cluster: {why}")
            }),
        });
        match started {
            Ok(cluster) => Some(cluster),
            Err(why) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "PostgreSQL is required under CI: {why}"
                );
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    /// A cluster of the caller's own (not the shared one), listening on 127.0.0.1 and
    /// on each of `also_listen` (addresses that must exist when it starts), accepting
    /// connections from 127.0.0.1 and from each network of `trust` (CIDR, e.g.
    /// `10.213.7.0/30`) with `trust` authentication. `None` (with a printed skip line)
    /// when PostgreSQL is not installed and this is not CI.
    ///
    /// # Panics
    /// Under `CI=true` when PostgreSQL is missing, and anywhere when it is installed but
    /// does not start.
    pub fn dedicated(also_listen: &[IpAddr], trust: &[&str]) -> Option<PgCluster> {
        let Some(bin) = find_bin() else {
            let why = "PostgreSQL not installed (apt-get install postgresql)";
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "PostgreSQL is required under CI: {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        };
        match PgCluster::start_with(&bin, also_listen, trust) {
            Ok(cluster) => Some(cluster),
            Err(Unavailable(why)) => panic!("cannot start a PostgreSQL test cluster: {why}"),
        }
    }

    /// Starts a new cluster with the binaries in `bin`, on 127.0.0.1 only.
    pub fn start(bin: &Path) -> Result<PgCluster, Unavailable> {
        PgCluster::start_with(bin, &[], &[])
    }

    /// [`PgCluster::start`], also listening on `also_listen` and trusting clients from
    /// the networks of `trust` (see [`PgCluster::dedicated`]).
    pub fn start_with(
        bin: &Path,
        also_listen: &[IpAddr],
        trust: &[&str],
    ) -> Result<PgCluster, Unavailable> {
        let fail = |what: &str, e: &dyn std::fmt::Display| Unavailable(format!("{what}: {e}"));
        let root = tempfile::Builder::new()
            .prefix("loops-pg-")
            .tempdir()
            .map_err(|e| fail("temp dir", &e))?
            .keep();
        let run_as = nix::unistd::geteuid()
            .is_root()
            .then(|| "postgres".to_owned());
        if let Some(user) = &run_as {
            let owner = nix::unistd::User::from_name(user)
                .map_err(|e| fail("look up the postgres user", &e))?
                .ok_or_else(|| Unavailable(format!("no {user} user to run PostgreSQL as")))?;
            nix::unistd::chown(&root, Some(owner.uid), Some(owner.gid))
                .map_err(|e| fail("chown the cluster dir", &e))?;
        }
        let cluster = PgCluster {
            bin: bin.to_path_buf(),
            port: free_port().map_err(|e| fail("pick a port", &e))?,
            root,
            run_as,
        };
        let data = cluster.root.join("data");
        cluster.run(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-A",
                "trust",
                "-U",
                "loops",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        if !trust.is_empty() {
            use std::io::Write as _;
            let hba = data.join("pg_hba.conf");
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&hba)
                .map_err(|e| fail("open pg_hba.conf", &e))?;
            for net in trust {
                writeln!(file, "host all all {net} trust")
                    .map_err(|e| fail("write pg_hba.conf", &e))?;
            }
        }
        let listen = std::iter::once("127.0.0.1".to_owned())
            .chain(also_listen.iter().map(IpAddr::to_string))
            .collect::<Vec<_>>()
            .join(",");
        let options = format!(
            "-p {} -k {} -c listen_addresses={listen} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            cluster.port,
            cluster.root.display()
        );
        cluster.run(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-o",
                &options,
                "-l",
                &cluster.root.join("server.log").display().to_string(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        )?;
        cluster.stop_on_exit();
        Ok(cluster)
    }

    /// Runs one of the cluster's programs (as the `postgres` user when we are root).
    fn run(&self, program: &str, args: &[&str]) -> Result<(), Unavailable> {
        let exe = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = cmd
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Unavailable(format!("cannot run {}: {e}", exe.display())))?;
        if !out.status.success() {
            return Err(Unavailable(format!(
                "{program} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Stops the server and removes its files once this test binary exits, however it
    /// exits: a watchdog shell waits for our pid to disappear.
    fn stop_on_exit(&self) {
        let data = self.root.join("data");
        let pg_ctl = self.bin.join("pg_ctl");
        let stop = match &self.run_as {
            Some(user) => format!(
                "runuser -u {user} -- {} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            ),
            None => format!(
                "{} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            ),
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {root}",
            pid = std::process::id(),
            root = self.root.display()
        );
        let spawned = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("warning: cannot watch the test cluster for cleanup: {e}");
        }
    }

    /// Stops the server now (`pg_ctl stop -m immediate`); its files go at exit. For a
    /// [`PgCluster::dedicated`] cluster a test is done with.
    pub fn stop(&self) {
        let data = self.root.join("data").display().to_string();
        if let Err(Unavailable(why)) = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"])
        {
            eprintln!("warning: cannot stop the test cluster: {why}");
        }
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for database `db` of this cluster.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://loops@127.0.0.1:{}/{db}", self.port)
    }

    /// A URL for database `db` of this cluster at `host` (one of the addresses it
    /// listens on).
    pub fn url_at(&self, host: IpAddr, db: &str) -> String {
        match host {
            IpAddr::V4(v4) => format!("postgres://loops@{v4}:{}/{db}", self.port),
            IpAddr::V6(v6) => format!("postgres://loops@[{v6}]:{}/{db}", self.port),
        }
    }

    /// A fresh, empty database for one test; returns its URL.
    pub fn database(&self) -> String {
        let n = DATABASES.fetch_add(1, Ordering::SeqCst);
        let name = format!("test_{}_{n}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Runs one SQL statement with `psql` (test setup and fault injection).
    ///
    /// # Panics
    /// When the statement fails.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self
            .psql_command(db, sql)
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// [`PgCluster::psql`] in the background, for a statement that holds something (a
    /// lock, behind `pg_sleep`) until it ends or the child is killed.
    ///
    /// # Panics
    /// When psql cannot be started.
    pub fn psql_child(&self, db: &str, sql: &str) -> std::process::Child {
        self.psql_command(db, sql)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"))
    }

    fn psql_command(&self, db: &str, sql: &str) -> Command {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "loops",
                "-d",
                db,
            ])
            .args(["-c", sql])
            .stdin(Stdio::null());
        psql
    }

    /// Waits until the server accepts connections again (after a restart of its network).
    pub fn wait_ready(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// The directory of `initdb`/`pg_ctl`: `$LOOPS_TEST_PG_BIN`, else `pg_config --bindir`,
/// else the newest `/usr/lib/postgresql/*/bin`.
pub fn find_bin() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("LOOPS_TEST_PG_BIN").map(PathBuf::from) {
        return has(&dir).then_some(dir);
    }
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(dir) = from_config.filter(|d| has(d)) {
        return Some(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| has(d))
        .collect();
    versions.sort();
    versions.pop()
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_starts_and_hands_out_separate_databases() {
        let Some(cluster) = PgCluster::shared() else {
            return;
        };
        let a = cluster.database();
        let b = cluster.database();
        assert_ne!(a, b);
        let db = a.rsplit('/').next().unwrap_or_default().to_owned();
        assert_eq!(cluster.psql(&db, "SELECT 1 + 1"), "2");
    }
}
