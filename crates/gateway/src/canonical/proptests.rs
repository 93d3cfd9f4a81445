//! Round trips through the canonical form (issue 33): for each protocol,
//! a canonical value in the protocol's domain (what it can say) rendered
//! and parsed back is the same value — requests, answers and streams
//! (a stream compared as the answer it adds up to). Each test prints its
//! case count.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Number, Value};

use super::*;
use crate::sse::Event;

/// Cases per test (each test prints how many ran).
const CASES: u32 = 512;

#[derive(Clone, Copy, Debug, PartialEq)]
enum P {
    Chat,
    Anthropic,
    Responses,
    Gemini,
    Bedrock,
}

fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _.-]{0,12}"
}

fn ident() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}"
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        (0u32..3).prop_map(Number::from),
        (0u32..200).prop_map(|n| Number::from_f64(f64::from(n) / 100.0).unwrap()),
    ]
}

fn object() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(
        ident(),
        prop_oneof![
            word().prop_map(Value::from),
            (0u32..1000).prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ],
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn image(p: P) -> BoxedStrategy<Image> {
    let b64 = ("image/(png|jpeg)", "[A-Za-z0-9+/]{1,16}")
        .prop_map(|(media_type, data)| Image::Base64 { media_type, data });
    if matches!(p, P::Gemini | P::Bedrock) {
        return b64.boxed();
    }
    prop_oneof![
        b64,
        "https://example\\.com/[a-z]{1,8}\\.png".prop_map(Image::Url),
    ]
    .boxed()
}

fn call(p: P) -> impl Strategy<Value = Part> {
    let gemini = p == P::Gemini;
    ("call_[a-z0-9]{1,6}", ident(), object()).prop_map(move |(id, name, input)| Part::ToolCall {
        id: (!gemini).then_some(id),
        name: Some(name),
        input,
    })
}

fn result(p: P) -> impl Strategy<Value = Part> {
    let gemini = p == P::Gemini;
    ("call_[a-z0-9]{1,6}", ident(), word()).prop_map(move |(id, name, content)| Part::ToolResult {
        id: (!gemini).then_some(id),
        name: gemini.then_some(name),
        content,
    })
}

/// A user turn the protocol can say, and read back as one message.
fn user(p: P) -> BoxedStrategy<Message> {
    let media = || prop_oneof![word().prop_map(Part::Text), image(p).prop_map(Part::Image)];
    let content = match p {
        // One tool result alone (a `tool` message / an output item), one
        // text alone (joined when all text), or parts with an image.
        P::Chat | P::Responses => prop_oneof![
            result(p).prop_map(|r| vec![r]),
            word().prop_map(|t| vec![Part::Text(t)]),
            (proptest::collection::vec(media(), 0..3), image(p)).prop_map(|(mut v, i)| {
                v.push(Part::Image(i));
                v
            }),
        ]
        .boxed(),
        P::Anthropic | P::Gemini | P::Bedrock => {
            proptest::collection::vec(prop_oneof![media(), result(p)], 1..4).boxed()
        }
    };
    content
        .prop_map(|content| Message {
            role: Role::User,
            content,
        })
        .boxed()
}

fn assistant(p: P) -> BoxedStrategy<Message> {
    let nonempty = "[a-z]{1,10}";
    let content = match p {
        // At most one text (the parts are joined), then tool calls.
        P::Chat | P::Responses => (
            proptest::option::of(nonempty),
            proptest::collection::vec(call(p), 0..3),
        )
            .prop_filter("something to say", |(t, c)| t.is_some() || !c.is_empty())
            .prop_map(|(t, c)| t.into_iter().map(Part::Text).chain(c).collect())
            .boxed(),
        P::Anthropic | P::Gemini | P::Bedrock => {
            proptest::collection::vec(prop_oneof![nonempty.prop_map(Part::Text), call(p)], 1..4)
                .boxed()
        }
    };
    content
        .prop_map(|content| Message {
            role: Role::Assistant,
            content,
        })
        .boxed()
}

/// Turns: Anthropic and Gemini merge a role's consecutive turns, and a
/// Responses function call joins the assistant turn before it, so the
/// roles alternate there; Chat may repeat user turns.
fn messages(p: P) -> BoxedStrategy<Vec<Message>> {
    let alternate = !matches!(p, P::Chat);
    proptest::collection::vec((user(p), assistant(p), any::<bool>()), 1..4)
        .prop_map(move |turns| {
            let mut out = Vec::new();
            for (u, a, both) in turns {
                out.push(u);
                if both || alternate {
                    out.push(a);
                }
            }
            out
        })
        .boxed()
}

fn tools() -> impl Strategy<Value = Vec<Tool>> {
    proptest::collection::vec(
        (ident(), proptest::option::of(word()), object()).prop_map(|(n, d, o)| Tool {
            name: Some(n),
            description: d,
            parameters: Some(json!({"type": "object", "properties": o})),
        }),
        0..3,
    )
}

fn choice() -> impl Strategy<Value = ToolChoice> {
    prop_oneof![
        Just(ToolChoice::Auto),
        Just(ToolChoice::Any),
        Just(ToolChoice::None),
        ident().prop_map(|n| ToolChoice::Tool(Some(n))),
    ]
}

fn request(p: P) -> BoxedStrategy<Request> {
    let scalars = (
        proptest::option::of(word()),
        proptest::option::of(1u64..100_000),
        proptest::option::of(number()),
        proptest::option::of(number()),
        proptest::option::of(proptest::collection::vec(word(), 0..3)),
        proptest::option::of(any::<bool>()),
    );
    let tooling = (
        proptest::option::of(tools()),
        proptest::option::of(choice()),
        any::<bool>(),
        proptest::option::of(ident()),
    );
    (scalars, tooling, messages(p))
        .prop_map(
            move |((system, max, temp, top, stop, stream), (tools, tc, serial, user), messages)| {
                let mut r = Request {
                    system: system.into_iter().collect(),
                    messages,
                    max_tokens: max,
                    temperature: temp,
                    top_p: top,
                    stop,
                    stream,
                    tools,
                    tool_choice: tc,
                    parallel_tool_calls: serial.then_some(false),
                    user,
                };
                match p {
                    P::Chat => {}
                    P::Anthropic => {
                        // A limit is always sent; serial calls ride on a choice.
                        r.max_tokens.get_or_insert(4096);
                        if r.tool_choice.is_none() {
                            r.parallel_tool_calls = None;
                        }
                    }
                    P::Responses => r.stop = None,
                    P::Gemini => {
                        r.user = None;
                        r.parallel_tool_calls = None;
                        r.stream = None;
                    }
                    P::Bedrock => {
                        r.user = None;
                        r.parallel_tool_calls = None;
                        r.stream = None;
                        // No "none" choice, and a choice only with tools.
                        if r.tool_choice == Some(ToolChoice::None) || r.tools.is_none() {
                            r.tool_choice = None;
                        }
                    }
                }
                r
            },
        )
        .boxed()
}

fn out_in(p: P, r: &Request) -> Request {
    let body = match p {
        P::Chat => openai_chat::request_out(r),
        P::Anthropic => anthropic::request_out(r),
        P::Responses => responses::request_out(r),
        P::Gemini => gemini::request_out(r),
        P::Bedrock => bedrock::request_out(r),
    }
    .unwrap_or_else(|e| panic!("{p:?} refused {r:?}: {e}"));
    // Through the wire: bytes, as an upstream would read them.
    let bytes = serde_json::to_vec(&body).unwrap();
    let body: serde_json::Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
    match p {
        P::Chat => openai_chat::request_in(&body),
        P::Anthropic => anthropic::request_in(&body),
        P::Responses => responses::request_in(&body),
        P::Gemini => gemini::request_in(&body),
        P::Bedrock => bedrock::request_in(&body),
    }
    .unwrap_or_else(|e| panic!("{p:?} did not read back {body:?}: {e}"))
}

fn run<T: std::fmt::Debug>(
    what: &str,
    strategy: impl Strategy<Value = T>,
    check: impl Fn(T) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let n = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&strategy, |v| {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        check(v)
    });
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
    println!(
        "round trip {what}: {} cases passed",
        n.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn requests_round_trip_in_every_protocol() {
    for p in [P::Chat, P::Anthropic, P::Responses, P::Gemini, P::Bedrock] {
        run(&format!("request {p:?}"), request(p), |r| {
            prop_assert_eq!(out_in(p, &r), r);
            Ok(())
        });
    }
}

// ---- answers ---------------------------------------------------------------

fn answer(p: P) -> BoxedStrategy<Response> {
    let prefix = match p {
        P::Chat => "chatcmpl-",
        P::Anthropic => "msg_",
        P::Responses => "resp_",
        P::Gemini | P::Bedrock => "",
    };
    let content = match p {
        P::Chat | P::Responses | P::Anthropic => (
            proptest::option::of("[a-z ]{1,20}"),
            proptest::collection::vec(call(P::Chat), 0..3),
        )
            .prop_map(|(t, c)| t.into_iter().map(Part::Text).chain(c).collect::<Vec<_>>())
            .boxed(),
        P::Gemini | P::Bedrock => proptest::collection::vec(
            prop_oneof!["[a-z ]{1,20}".prop_map(Part::Text), call(P::Chat)],
            0..4,
        )
        .boxed(),
    };
    let stops = match p {
        P::Chat => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ToolUse,
            StopReason::ContentFilter,
        ],
        P::Anthropic => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ToolUse,
            StopReason::StopSequence,
        ],
        // Completed with calls is a tool use, without is an end of turn.
        P::Responses | P::Gemini => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ContentFilter,
        ],
        P::Bedrock => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ToolUse,
            StopReason::StopSequence,
            StopReason::ContentFilter,
        ],
    };
    (
        "[a-z0-9]{1,10}",
        ident(),
        content,
        proptest::sample::select(stops),
        0u64..u32::MAX as u64,
        0u64..u32::MAX as u64,
    )
        .prop_map(move |(id, model, content, stop, input, output)| {
            let calls = content.iter().any(|c| matches!(c, Part::ToolCall { .. }));
            let stop = match (p, stop) {
                (P::Responses | P::Gemini, StopReason::EndTurn) if calls => StopReason::ToolUse,
                _ => stop,
            };
            // Converse answers carry no id and no model.
            let bare = p == P::Bedrock;
            Response {
                id: (!bare).then(|| format!("{prefix}{id}")),
                model: (!bare).then_some(model),
                content,
                stop,
                usage: Usage { input, output },
            }
        })
        .boxed()
}

#[test]
fn answers_round_trip_in_every_protocol() {
    for p in [P::Chat, P::Anthropic, P::Responses, P::Gemini, P::Bedrock] {
        run(&format!("answer {p:?}"), answer(p), |r| {
            let wire = match p {
                P::Chat => openai_chat::response_out(&r),
                P::Anthropic => anthropic::response_out(&r),
                P::Responses => responses::response_out(&r),
                P::Gemini => gemini::response_out(&r),
                P::Bedrock => bedrock::response_out(&r),
            };
            let back = match p {
                P::Chat => openai_chat::response_in(&wire),
                P::Anthropic => anthropic::response_in(&wire),
                P::Responses => responses::response_in(&wire),
                P::Gemini => gemini::response_in(&wire),
                P::Bedrock => bedrock::response_in(&wire),
            };
            prop_assert_eq!(back, r);
            Ok(())
        });
    }
}

// ---- streams ---------------------------------------------------------------

/// What a stream adds up to.
#[derive(Debug, Default, PartialEq)]
struct Sum {
    id: Option<String>,
    model: Option<String>,
    text: String,
    /// (id, name, arguments) per call, in order.
    calls: Vec<(Option<String>, Option<String>, String)>,
    stop: Option<StopReason>,
    input: Option<u64>,
    output: Option<u64>,
    ended: bool,
}

fn sum(events: &[StreamEvent]) -> Sum {
    let mut s = Sum::default();
    let mut index: Vec<u64> = Vec::new();
    for e in events {
        match e {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                s.id = id.clone();
                s.model = model.clone();
                if input_tokens.is_some() {
                    s.input = *input_tokens;
                }
            }
            StreamEvent::Text(t) => s.text.push_str(t),
            StreamEvent::ToolStart { index: i, id, name } => {
                index.push(*i);
                s.calls.push((id.clone(), name.clone(), String::new()));
            }
            StreamEvent::ToolArgs { index: i, fragment } => {
                if let Some(k) = index.iter().position(|x| x == i) {
                    s.calls[k].2.push_str(fragment);
                }
            }
            StreamEvent::Usage { input, output } => {
                if input.is_some() {
                    s.input = *input;
                }
                if output.is_some() {
                    s.output = *output;
                }
            }
            StreamEvent::Finish(r) => s.stop = Some(*r),
            StreamEvent::End => s.ended = true,
        }
    }
    s
}

fn stream(p: P) -> BoxedStrategy<Vec<StreamEvent>> {
    let prefix = match p {
        P::Chat => "chatcmpl-",
        P::Anthropic => "msg_",
        P::Responses => "resp_",
        P::Gemini | P::Bedrock => "",
    };
    let stops = match p {
        P::Chat => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ContentFilter,
        ],
        P::Anthropic => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::StopSequence,
        ],
        P::Responses | P::Gemini => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ContentFilter,
        ],
        P::Bedrock => vec![
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::StopSequence,
            StopReason::ContentFilter,
        ],
    };
    (
        "[a-z0-9]{1,10}",
        ident(),
        proptest::collection::vec("[a-z ]{1,6}", 0..5),
        proptest::collection::vec(("call_[a-z0-9]{1,4}", ident(), object(), 1usize..4), 0..3),
        proptest::sample::select(stops),
        0u64..100_000,
        0u64..100_000,
    )
        .prop_map(move |(id, model, texts, calls, stop, input, output)| {
            let bare = p == P::Bedrock;
            let mut ev = vec![StreamEvent::Start {
                id: (!bare).then(|| format!("{prefix}{id}")),
                model: (!bare).then_some(model),
                input_tokens: None,
            }];
            ev.extend(texts.into_iter().map(StreamEvent::Text));
            let any_call = !calls.is_empty();
            for (i, (cid, name, args, pieces)) in calls.into_iter().enumerate() {
                ev.push(StreamEvent::ToolStart {
                    index: i as u64,
                    id: Some(cid),
                    name: Some(name),
                });
                let text = args.to_string();
                // Split on char boundaries into `pieces` fragments
                // (Gemini sends the arguments whole).
                let pieces = if p == P::Gemini { 1 } else { pieces };
                let chars: Vec<char> = text.chars().collect();
                let step = chars.len().div_ceil(pieces).max(1);
                for c in chars.chunks(step) {
                    ev.push(StreamEvent::ToolArgs {
                        index: i as u64,
                        fragment: c.iter().collect(),
                    });
                }
            }
            let stop = match stop {
                StopReason::EndTurn if any_call => StopReason::ToolUse,
                s => s,
            };
            ev.push(StreamEvent::Usage {
                input: Some(input),
                output: Some(output),
            });
            ev.push(StreamEvent::Finish(stop));
            ev.push(StreamEvent::End);
            ev
        })
        .boxed()
}

/// A Gemini stream for canonical events (the gateway never sends one:
/// Gemini is an upstream protocol only): a chunk per text, a chunk per
/// call, the finish and usage on the last.
fn gemini_chunks(events: &[StreamEvent]) -> Vec<Event> {
    let s = sum(events);
    let mut chunks = Vec::new();
    let head = |parts: Value| {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
               "modelVersion": opt(&s.model), "responseId": opt(&s.id)})
    };
    for e in events {
        if let StreamEvent::Text(t) = e {
            chunks.push(head(json!([{"text": t}])));
        }
    }
    for (id, name, args) in &s.calls {
        let args: Value = serde_json::from_str(args).unwrap();
        chunks.push(head(
            json!([{"functionCall": {"id": opt(id), "name": opt(name), "args": args}}]),
        ));
    }
    let stop = match s.stop.unwrap_or_default() {
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter => "SAFETY",
        _ => "STOP",
    };
    let mut last = head(json!([]));
    last["candidates"][0]["finishReason"] = json!(stop);
    last["usageMetadata"] = json!({"promptTokenCount": s.input, "candidatesTokenCount": s.output});
    chunks.push(last);
    let mut out: Vec<Event> = chunks.iter().map(|c| Event::data(c.to_string())).collect();
    // The relay's end of a body after the last chunk.
    out.push(Event::data("[DONE]"));
    out
}

#[test]
fn streams_round_trip_in_every_protocol() {
    use crate::protocol::Protocol;
    use crate::translate::{StreamIn, StreamOut};
    for p in [P::Chat, P::Anthropic, P::Responses, P::Gemini, P::Bedrock] {
        run(&format!("stream {p:?}"), stream(p), |events| {
            let wire: Vec<Event> = match p {
                P::Gemini => gemini_chunks(&events),
                // The event type as the name (the gateway's reading of
                // an event-stream frame).
                P::Bedrock => bedrock::stream_out(&events)
                    .into_iter()
                    .map(|(ty, payload)| Event::named(&ty, &payload))
                    .collect(),
                _ => {
                    let proto = match p {
                        P::Chat => Protocol::OpenAi,
                        P::Anthropic => Protocol::Anthropic,
                        _ => Protocol::Responses,
                    };
                    let mut out = StreamOut::new(proto, true);
                    events.iter().cloned().flat_map(|e| out.push(e)).collect()
                }
            };
            // Through the wire: SSE text, split by the gateway's parser.
            let text: String = wire.iter().map(Event::encode).collect();
            let mut parser = crate::sse::SseParser::default();
            let parsed = parser.push(text.as_bytes()).unwrap();
            prop_assert_eq!(&parsed, &wire);
            let proto = match p {
                P::Chat => Protocol::OpenAi,
                P::Anthropic => Protocol::Anthropic,
                P::Responses => Protocol::Responses,
                P::Gemini => Protocol::Gemini,
                P::Bedrock => Protocol::Bedrock,
            };
            let mut back = StreamIn::new(proto);
            let read: Vec<StreamEvent> = parsed.iter().flat_map(|e| back.push(e)).collect();
            prop_assert_eq!(sum(&read), sum(&events));
            Ok(())
        });
    }
}
