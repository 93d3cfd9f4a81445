//! A real `redis-server` for the tests: started on a free loopback port
//! in a temporary directory (append-only file, fsync always, so a restart
//! keeps every acknowledged write), stopped when dropped.
//!
//! Without the binary the Redis tests fail, saying how to install it,
//! unless `FAILOVER_SKIP_REDIS=1` is set: then each prints that it was
//! skipped (a test that needs a real component never passes silently
//! without it). Under CI (`CI` set) the opt-out is ignored: `.ci/run`
//! installs the server.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server` (append-only, fsync always) in its own
/// temporary directory; killed and removed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    /// The loopback port it listens on.
    pub port: u16,
    dir: PathBuf,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Whether `redis-server` can be run; prints the skip reason when not.
pub fn available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is missing under CI: .ci/run installs it"
        );
        assert!(
            std::env::var_os("FAILOVER_SKIP_REDIS").is_some_and(|v| v == "1"),
            "redis-server is not installed: `apt-get install -y redis-server` \
             (or set FAILOVER_SKIP_REDIS=1 to skip the tests that need it)"
        );
        eprintln!("SKIPPED: redis-server is not installed (FAILOVER_SKIP_REDIS=1)");
    }
    ok
}

impl RedisServer {
    /// `None` (with a message) when `redis-server` is not installed.
    pub fn start() -> Option<Self> {
        if !available() {
            return None;
        }
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("failover-redis-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir,
        };
        s.spawn();
        Some(s)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .args(["--protected-mode", "yes", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = redis::Client::open(self.url().as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < until, "redis-server did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stops the server with SIGKILL (as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let until = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills and starts it again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
