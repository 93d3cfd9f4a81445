//! Secrets never reach error text (SPEC R16.11): configs with fake secrets
//! (every one holds `FAKE`) in values and keys that messages quote.
//! Nothing rendered, by the library or by `failover chain`, may show one,
//! while every problem is still reported with its path, line and column.

use std::process::Command;

use failover::errors::Severity;
use failover::{ConfigProblem, GatewayConfig};

const DIR: &str = "tests/fixtures/config-secrets";

fn path(name: &str) -> std::path::PathBuf {
    crate::repo_root().join(DIR).join(name)
}

fn assert_no_fake(what: &str, text: &str) {
    // Lower-cased: provider ids are, and a message may be too.
    assert!(
        !text.to_ascii_lowercase().contains("fake"),
        "{what} shows a fake secret:\n{text}"
    );
}

/// (severity, path, line, column) of one problem.
type Where = (Severity, String, usize, usize);

fn places(problems: &[ConfigProblem]) -> Vec<(Severity, String, Option<usize>, Option<usize>)> {
    problems
        .iter()
        .map(|p| (p.severity(), p.path.clone(), p.line, p.column))
        .collect()
}

fn expect(want: &[Where]) -> Vec<(Severity, String, Option<usize>, Option<usize>)> {
    want.iter()
        .map(|(s, p, l, c)| (*s, p.clone(), Some(*l), Some(*c)))
        .collect()
}

fn check_error_file(name: &str, want: &[Where]) {
    let e = GatewayConfig::load(&path(name)).expect_err("the fixture has errors");
    let rendered = e.to_string();
    for p in &e.problems {
        assert_no_fake("a message", &p.message);
        assert_no_fake("a help", p.help.as_deref().unwrap_or(""));
    }
    assert_no_fake("the rendered problems", &rendered);
    assert_eq!(places(&e.problems), expect(want), "{rendered}");
    // Every placed problem says where, even when its line is hidden.
    for p in &e.problems {
        let at = format!(":{}:{}\n", p.line.unwrap(), p.column.unwrap());
        assert!(rendered.contains(&at), "{at} missing:\n{rendered}");
    }
}

fn chain(config: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["chain", "--config", config])
        .current_dir(crate::repo_root())
        .output()
        .expect("the binary runs");
    (
        out.status.code().expect("exited"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The profile most fake secrets sit in.
const P: &str = "auth.profiles[\"openai:default\"]";

#[test]
fn yaml_errors_never_show_a_secret() {
    use Severity::*;
    let openai = |k: &str| format!("{P}.{k}");
    let want: Vec<Where> = vec![
        (Error, "agents.defaults.model.primary".into(), 8, 16),
        (Error, "agents.defaults.model.fallbacks".into(), 9, 18),
        (Error, "agents.list[1].id".into(), 15, 11),
        (Error, openai("mode"), 20, 13),
        (
            Error,
            "auth.profiles[\"google:default\"].type".into(),
            39,
            9,
        ),
        (
            Warning,
            "agents.defaults.imageModel.fallbacks[1]".into(),
            12,
            49,
        ),
        (Warning, openai("accessToken"), 21, 7),
        (Warning, openai("refreshToken"), 22, 7),
        (Warning, openai("apiToken"), 23, 7),
        (Warning, openai("authorization"), 24, 7),
        (Warning, openai("privateKey"), 25, 7),
        (Warning, openai("bearer"), 26, 7),
        (Warning, openai("client-secret"), 27, 7),
        (Warning, openai("AUTH_HEADER"), 28, 7),
        (Warning, openai("Passwd"), 29, 7),
        (Warning, openai("note"), 30, 7),
        (Warning, openai("slack"), 31, 7),
        (Warning, openai("blob"), 32, 7),
        (Warning, openai("hint"), 33, 7),
        (Warning, "auth.profiles[\"anthropic:x\"]".into(), 35, 7),
        (Warning, "auth.order.openai[1]".into(), 41, 39),
    ];
    check_error_file("errors.yaml", &want);
}

#[test]
fn json_errors_never_show_a_secret() {
    use Severity::*;
    let openai = |k: &str| format!("{P}.{k}");
    check_error_file(
        "errors.json",
        &[
            (Error, openai("mode"), 7, 17),
            (Warning, openai("refreshToken"), 6, 9),
            (Warning, openai("x-api-key"), 8, 9),
            (Warning, openai("sessionCookie"), 9, 9),
        ],
    );
}

#[test]
fn chain_cli_never_shows_a_secret() {
    for name in ["errors.yaml", "errors.json"] {
        let config = format!("{DIR}/{name}");
        let (code, stdout, stderr) = chain(&config);
        assert_eq!(code, 2, "{stderr}");
        assert_no_fake("stdout", &stdout);
        assert_no_fake("stderr", &stderr);
        assert!(stderr.contains("error[E02"), "{stderr}");
    }
    // Warnings only: the config loads, the warnings are shown, the lines
    // with secrets are not.
    let (code, stdout, stderr) = chain(&format!("{DIR}/warnings.yaml"));
    assert_eq!(code, 0, "{stderr}");
    assert_no_fake("stdout", &stdout);
    assert_no_fake("stderr", &stderr);
    for (key, line) in [
        ("agents.defaults.bearerToken", 9),
        ("accessToken", 14),
        ("oauthRefreshToken", 15),
        ("authorization", 16),
        ("extra", 17),
    ] {
        assert!(stderr.contains(key), "{key} not warned about:\n{stderr}");
        let at = format!("warnings.yaml:{line}:");
        assert!(stderr.contains(&at), "{at} missing:\n{stderr}");
    }
    assert_eq!(
        stderr
            .matches("(line not shown: it may hold a secret)")
            .count(),
        5,
        "{stderr}"
    );
}

/// Issue 16 item 5: a profile id that is itself a key gave
/// `warning: auth.profiles.sk-proj-…: … the value is not shown, as it
/// looks like a secret` — the path printed what the message hid. Key
/// paths are redacted like values, in the library's problems and in what
/// `chain` and `status` print.
#[test]
fn a_secret_shaped_key_is_not_shown_in_its_path() {
    let key = "sk-proj-FAKEa8Kd93jLqP0xZ7vB2nM4cT6yW1eR5uI";
    let text = format!(
        "agents: {{defaults: {{model: {{primary: openai/gpt-5.2}}}}}}\n\
         auth:\n  profiles:\n    \"{key}\": {{provider: openai, mode: api_key}}\n    {key}x: {{provider: openai}}\n"
    );
    let rendered = match GatewayConfig::parse(&text, failover::Format::Yaml, "c.yaml") {
        Ok(loaded) => {
            assert!(!loaded.warnings.is_empty());
            for p in &loaded.warnings {
                assert_no_fake("a path", &p.path);
                assert_no_fake("a message", &p.message);
            }
            failover::render_problems(&loaded.warnings, "c.yaml", &loaded.text)
        }
        Err(e) => {
            for p in &e.problems {
                assert_no_fake("a path", &p.path);
            }
            e.to_string()
        }
    };
    assert_no_fake("the rendered problems", &rendered);
    assert!(rendered.contains("auth.profiles"), "{rendered}");
    assert!(rendered.contains("sk-…"), "{rendered}");
    let dir = support_dir("keypath");
    let p = dir.join("c.yaml");
    std::fs::write(&p, &text).unwrap();
    let (_, out, err) = chain(p.to_str().unwrap());
    assert_no_fake("chain's output", &format!("{out}{err}"));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn support_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("failover-cfgsec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
