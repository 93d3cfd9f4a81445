//! The gateway's integration tests, one binary (`cargo test -p
//! failover-gateway --test it`): real upstream HTTP servers on loopback
//! (`serve_support`) and the real gateway started in-process.
//! `fuzz_upstream` runs 48 inputs; CI runs more with `FUZZ_CASES`
//! (`.ci/run`).

mod serve_support;

mod fuzz_upstream;
mod serve_faults;
mod serve_hostile;
mod serve_input;
mod serve_keys;
mod serve_load;
mod serve_protocols;
mod serve_proxy;
mod serve_reload;
mod serve_replicas;
mod serve_sdk;
mod serve_streams;
mod serve_workers;
