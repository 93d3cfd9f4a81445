//! `failover serve` as a child process, for the tests that run the binary
//! (serve_reload_cli, serve_memory, serve_traces): a guard that kills it
//! if the test ends first, and its stderr lines gathered by a thread.

use std::io::BufRead;
use std::process::Child;
use std::sync::{Arc, Mutex};

/// Kills the child (and waits for it) if the test ends before it stops it.
pub(crate) struct Killed(pub(crate) Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The lines `child` writes to its (piped) stderr, as they come.
pub(crate) fn stderr_lines(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let stderr = child.stderr.take().expect("stderr piped");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(l);
        }
    });
    lines
}

/// The address of the gateway's JSON `listening` line, once written.
pub(crate) fn listen_addr(lines: &Mutex<Vec<String>>) -> Option<String> {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "listening")
        .and_then(|v| v["listen"].as_str().map(str::to_string))
}
