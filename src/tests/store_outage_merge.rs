//! A success seen during a Redis outage, merged back (issue 13, item 6):
//! a real `redis-server` on a free loopback port, stopped (SIGKILL) and
//! restarted. Replica B records a rate-limit cooldown; replica A reads it,
//! loses the server, sees the profile answer (a success in its local
//! view), and when the server returns merges it back: the success clears
//! the window and resets the counts, as it would have online — before
//! this, the merge took the larger count and the later deadline, so the
//! profile stayed cooling although it had answered.

use crate::auth::{record_failure, record_success, CooldownPolicy, Failure};
use crate::store::{edit_profile, AsyncStore, RedisStore};
use crate::Engine;

use failover_testkit::RedisServer;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_during_an_outage_is_not_undone_by_the_merge() {
    let Some(mut server) = RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = std::env::temp_dir().join(format!("failover-outage-merge-{}", std::process::id()));
    let a = RedisStore::connect(&server.url(), "merge:", &dir, "main")
        .await
        .unwrap();
    let b = RedisStore::connect(&server.url(), "merge:", &dir, "main")
        .await
        .unwrap();
    // What errors and `status` name the store by (R16.11: a URL's password
    // would be masked, `redact_url`).
    assert_eq!(a.server(), server.url());
    let shown = format!("{a:?}");
    assert!(
        shown.starts_with("RedisStore") && shown.contains(&server.url()),
        "{shown}"
    );
    let behaviour = {
        let e = Engine::builtin();
        let rs = e.ruleset();
        rs.reason(rs.reason_id("rate_limit").unwrap())
            .behaviour
            .clone()
    };
    let t0 = now_ms();
    let f = Failure {
        reason: "rate_limit",
        behaviour: &behaviour,
        model: None,
        reset_at: Some(t0 + 600_000),
        probe: false,
        outranks: None,
    };
    let policy = CooldownPolicy::default();
    edit_profile(&b, "openai:a", "openai", |s| {
        record_failure(s, "openai:a", "openai", &f, &policy, t0)
    })
    .await
    .unwrap();
    let st = AsyncStore::load_state(&a).await.unwrap();
    assert!(st.usage_stats["openai:a"].cooldown_until > Some(t0));

    server.kill();
    edit_profile(&a, "openai:a", "openai", |s| {
        record_success(s, "openai:a", "openai", Some("gpt"), t0 + 1_000)
    })
    .await
    .unwrap();
    assert!(!a.is_up(), "the update went to the local view");
    let local = AsyncStore::load_state(&a).await.unwrap();
    assert_eq!(local.usage_stats["openai:a"].cooldown_until, None);

    server.restart();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while !a.is_up() {
        assert!(std::time::Instant::now() < until, "never reconnected");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let _ = AsyncStore::load_state(&a).await;
    }
    // A fresh replica reads the server (B's own connection broke with the
    // restart, so B would answer from its local view at first).
    drop(b);
    let c = RedisStore::connect(&server.url(), "merge:", &dir, "main")
        .await
        .unwrap();
    let st = AsyncStore::load_state(&c).await.unwrap();
    assert!(c.is_up());
    let s = &st.usage_stats["openai:a"];
    assert_eq!(s.cooldown_until, None, "the success's clearing merged back");
    assert_eq!(s.error_count, 0);
    assert_eq!(s.last_used, Some(t0 + 1_000));
    assert_eq!(s.last_failure_at, Some(t0), "the failure's time is kept");
    let _ = std::fs::remove_dir_all(&dir);
}
