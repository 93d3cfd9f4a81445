//! OpenTelemetry traces (issue 48): `failover serve` with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` exports its spans over OTLP/HTTP to a real
//! receiver (tests/otlp/receiver.py, decoding with the official protobuf
//! definitions, `opentelemetry-proto`), and the span tree of one fallback
//! request is what docs/tracing.md says: one `failover_run` per request, a
//! `failover_attempt` child per upstream call with the GenAI attributes,
//! the decisions as events of the run — and no key anywhere.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::serve_process::{listen_addr, stderr_lines, Killed};
use crate::serve_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i48_a_fallback_request_is_one_trace_with_a_span_per_attempt() {
    let Some(python) = sdk_python("i48_a_fallback_request_is_one_trace_with_a_span_per_attempt")
    else {
        return;
    };
    let dir = temp_dir("traces");
    let spans_file = dir.join("spans.jsonl");
    let mut receiver = Command::new(python)
        .arg(crate::repo_root().join("tests/otlp/receiver.py"))
        .arg(&spans_file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(receiver.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let _receiver = Killed(Some(receiver));
    let port: u16 = first
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("receiver said {first:?}"));

    let prim = Mock::start().await;
    let back = Mock::start().await;
    write_profiles(&dir);
    let cfg = dir.join("gateway.yaml");
    std::fs::write(&cfg, config_text(&Setup::default(), &prim, &back)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--state")
        .arg(dir.join("state"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_SERVICE_NAME", "failover-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env("NO_PROXY", "127.0.0.1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let pid = child.id();
    let mut serve = Killed(Some(child));
    eventually("the gateway to listen", || listen_addr(&lines).is_some()).await;
    let addr = listen_addr(&lines).unwrap();

    prim.push(error(
        429,
        r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#,
    ));
    back.push(ok_openai("from back"));
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&chat("prim/model-a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // SIGTERM: the gateway drains and exports what is waiting.
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while serve.0.as_mut().unwrap().try_wait().unwrap().is_none()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eventually("the spans to arrive", || {
        std::fs::read_to_string(&spans_file)
            .map(|t| t.lines().filter(|l| l.contains("failover_")).count() >= 3)
            .unwrap_or(false)
    })
    .await;
    let text = std::fs::read_to_string(&spans_file).unwrap();
    assert!(!text.contains("sk-"), "a key reached the traces: {text}");
    let spans: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let runs: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "failover_run")
        .collect();
    assert_eq!(runs.len(), 1, "{text}");
    let run = runs[0];
    assert_eq!(run["resource"]["service.name"], "failover-test");
    assert_eq!(
        run["parent_span_id"], "",
        "the run is the request's root span"
    );
    let mut attempts: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "failover_attempt")
        .collect();
    attempts.sort_by_key(|a| a["attributes"]["attempt"].as_i64());
    assert_eq!(attempts.len(), 2, "{text}");
    for a in &attempts {
        assert_eq!(a["trace_id"], run["trace_id"], "one trace: {text}");
        assert_eq!(
            a["parent_span_id"], run["span_id"],
            "children of the run: {text}"
        );
        assert_eq!(a["attributes"]["gen_ai.operation.name"], "chat");
    }
    let (first, second) = (&attempts[0]["attributes"], &attempts[1]["attributes"]);
    assert_eq!(first["gen_ai.system"], "prim");
    assert_eq!(first["gen_ai.request.model"], "model-a");
    assert_eq!(first["profile_id"], "prim:default");
    assert_eq!(first["error.type"], "http_4xx");
    assert_eq!(first["http.response.status_code"], 429);
    assert_eq!(second["gen_ai.system"], "back");
    assert_eq!(second["gen_ai.request.model"], "model-b");
    assert!(second.get("error.type").is_none(), "{second}");
    // The whole answer's token usage (ok_openai's usage block).
    assert!(second["gen_ai.usage.input_tokens"].is_i64(), "{second}");
    // The decisions are the run's events, with the reason and how it was
    // decided.
    let decisions: Vec<&Value> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["attributes"]["fallbackStepFromModel"].is_string())
        .collect();
    assert_eq!(decisions.len(), 2, "{run}");
    let failed = &decisions[0]["attributes"];
    assert_eq!(failed["decision"], "candidate_failed");
    assert_eq!(failed["fallbackStepFromFailureReason"], "rate_limit");
    assert_eq!(failed["fallbackStepClassifiedBy"], "rule");
    assert_eq!(failed["fallbackStepToModel"], "back/model-b");
    assert_eq!(
        decisions[1]["attributes"]["fallbackStepFinalOutcome"],
        "succeeded"
    );
    eprintln!("the trace as the receiver decoded it:\n{text}");
}
